"""The super-step engine: planning, running tasks, the loop, and its events."""
