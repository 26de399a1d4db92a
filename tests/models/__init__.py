"""Model-based tests (issue 39, item 6): Hypothesis state machines, one per family (locks,
read-write locks, semaphores, fenced locks), against a real ``redis-server`` of their own
that the machines restart, evict and expire. Each step is checked against a small model of
what Redis must hold and who must have been told of a loss. ``helpers.py`` says how faults
are made and how both faces are driven from one machine."""
