"""``exo spawn``, split by step: the operation is in ``op.py``; its module docstring maps the parts.

Kept empty on purpose: importing one part (``recovery`` for ``exo doctor``, ``pending`` when
a turn ends) does not load the others.
"""
