"""The chaos campaign (``scripts/chaos``): every primitive under a seeded nemesis, judged by
an independent checker. See ``docs/guarantees.md#the-chaos-campaign``."""
