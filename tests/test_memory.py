"""bot.memory: the allocator calls serve makes. Where the C library is glibc (Heroku, CI) they are made;
elsewhere they do nothing."""

from __future__ import annotations

import platform

from bot import memory


def test_the_arena_limit_is_set_where_the_c_library_is_glibc_and_memory_is_given_back():
    glibc = platform.libc_ver()[0] == "glibc"
    assert (memory._glibc() is not None) is glibc
    assert memory.limit_arenas(memory.ARENAS) is glibc
    held = [bytearray(200_000) for _ in range(200)]  # 40 MB freed, then handed back
    del held
    memory.give_back()
