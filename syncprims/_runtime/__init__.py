"""The executors: each client's transport and background services, put together.

This layer sits above the transport (``syncprims._transport``) and the services
(``syncprims._services``), which know nothing of each other, and below the faces, which build
one executor per client and hand it to the core objects (``syncprims._core``), which see it
only through :class:`syncprims._protocol.contracts.Executor`.
"""
