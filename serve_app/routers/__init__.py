"""One router per capability group. Routes parse, authorise, call one service function, return a schema."""
