"""Plans for shape profiles: a dynamic model judged at every bucket of the shapes a user states.

:mod:`.variants` (what a variant runs), :mod:`.samples` (the inputs per bucket), :mod:`.lowered` (bf16 and int8
candidates of the dynamic model), :mod:`.judge` (each candidate's error and time at every bucket),
:mod:`.choose` (which variants serve which shapes), :mod:`.saved` (the plan directory and its dispatch),
:mod:`.timing` (a saved plan timed again per bucket) and :mod:`.api` (``optimize`` for a profile).
"""
