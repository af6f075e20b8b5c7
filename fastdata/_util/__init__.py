"""Small private helpers the rooms above share.

Optional packages (:mod:`.optional`), atomic files and
file checksums (:mod:`.fs`), byte sizes (:mod:`.sizes`), safe text (:mod:`.text`), malloc tuning
(:mod:`.malloc`), the CPUs this process may use (:mod:`.cpus`). Nothing here imports another room.
"""
