"""Plugin files: each ``*.py`` file in this folder is loaded before a run (see :mod:`trinity.utils.plugins`).

Put a module that registers your own workflows, rewards, algorithms or
operators here, or keep it anywhere and name its folder with
``trinity run --plugin-dir DIR`` or ``TRINITY_PLUGIN_DIRS``.
"""
