"""Search engines: document parsing, chunking, lexical and vector retrieval, fusion, the chunk store."""
