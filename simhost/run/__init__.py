"""``simhost run``: scripted multi-turn concurrency scenarios against an agent."""
