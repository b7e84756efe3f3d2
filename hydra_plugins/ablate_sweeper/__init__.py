"""``hydra/sweeper=ablate``: ablate's sweeper (the default of every ``ablate -m``). Hydra loads
sweepers only from the ``hydra_plugins`` namespace; the sweep itself is ``ablate.sweeper``'s."""
