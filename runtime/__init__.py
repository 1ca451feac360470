"""The process a piece of the service runs in, below everything that serves (it imports ``contracts`` at most, and
Ray only where Serve gives what it needs):

- ``runtime.memory``: freed heap memory handed back to the operating system;
- ``runtime.metrics``: the application's Prometheus metrics (through Ray's metrics agent);
- ``runtime.request_context``: the request id Serve carries, for log lines;
- ``runtime.ports``: free ports, and blocks of them for Serve's direct-ingress replicas;
- ``runtime.processes``: the processes a command started (by parent and by session) and their memory.
"""
