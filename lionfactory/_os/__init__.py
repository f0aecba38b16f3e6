"""The seams to the operating system (floor 1), one module per concern.

Paths beneath the workspace root, protected names, processes and their
confinement (the isolation policy, its mechanisms, the Landlock exec helper),
helper binaries, and the project's ignore rules with the global-excludes
reader. Private: public names are re-exported by `lionfactory` and its packages.
"""
