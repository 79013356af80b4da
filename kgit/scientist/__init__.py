"""The scientist's stages (select, design, write), the edit format, the litellm wrapper
and the offline strategist. `kgit.evolve` drives them.
"""
