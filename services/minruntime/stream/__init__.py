"""The faust stream processors: topics, thin agents, dead letters, the outbox relay."""
