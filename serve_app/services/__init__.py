"""Service functions: what a route does, without HTTP. Routers parse and authorise, then call one of these."""
