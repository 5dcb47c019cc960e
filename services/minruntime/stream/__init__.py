"""The stream processor: topics, the batched consumer, the batch sink, dead letters, the relay."""
