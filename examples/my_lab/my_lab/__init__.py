"""my_lab: a researcher's own components for ``ablate``, selected by ``_target_`` from a config dir.

* :class:`my_lab.attention.SigmoidAttention`: ``qkv_sharing=sigmoid`` (Ramapuram et al. 2024);
* :class:`my_lab.tasks.RunningCount`: ``task=count``.
"""
