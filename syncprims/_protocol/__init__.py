"""Protocol leaves: key names, ids, Lua scripts, durations and the timing wheel.

Nothing in this package imports ``asyncio`` or ``redis``; it is unit-tested alone.
"""
