"""How a policy reads a shell script (floor 1), before anything runs it.

`parse` cuts a script into simple commands with a real POSIX-shell grammar;
`commands` reads each one the way the shell would run it (wrappers looked
through, inner scripts read, one nesting limit), the one normalization every
command policy shares; `flags` answers which options a command was given.
The bash tool's own word splitter (``tools/_bash_shellsplit.py``) is not here:
it serves only the tool's unconfined mode, where no script is parsed at all.
Private: public names are re-exported by `lionfactory.coding`.
"""
