"""Small types that every layer shares: the topic-partition key, the clock and the config
definitions. Imports nothing else of Rivulet, so any package may depend on it."""
