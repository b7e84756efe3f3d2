"""ablate's config files read once per process by Hydra: a config source that keeps what it loads,
and the search path plugin that puts ablate's config tree behind it (``config_cache.py``)."""
