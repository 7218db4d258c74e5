"""mlresearch-bot: follow Apple Machine Learning Research from Slack."""
__version__ = "0.1.0"
