"""Loaders for public traces (Azure LLM inference, BurstGPT, Mooncake, Vidur), on
the rows every public trace comes down to."""
