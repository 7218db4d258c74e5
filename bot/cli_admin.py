"""The command line's upkeep of the database: `migrate` (the schema, and OAuth installations resealed with
the first key), `reindex` (what search derives from the archive, rebuilt) and `demo` (the bundled archive
loaded into an empty database), beside the library calls they wrap.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bot.cli_common import embed_archive, open_archive, open_store, out
from bot.config import Settings
from bot.errors import EXIT_OK, Failure


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    """Create or upgrade the schema; one line says what was done."""
    from bot import store as stores

    store = stores.open_store(settings.database_url)
    applied = store.migrate()
    done = f"applied {len(applied)} migration(s): {', '.join(applied)}" if applied else "already up to date"
    out(f"{store.describe()}: schema {done}")
    # OAuth installations sealed with the first key (rotation); any that no key opens fails the release
    # phase, so a wrong or missing TOKEN_ENCRYPTION_KEY is seen before every delivery fails
    from bot.oauth import reseal_installations
    from bot.secrets_at_rest import TokenCipher

    resealed, unreadable = reseal_installations(store, TokenCipher.of(settings.token_encryption_keys))
    if settings.token_encryption_keys:
        out(f"installations: {resealed} encrypted with the first TOKEN_ENCRYPTION_KEY key")
    if unreadable:
        held = "none of the TOKEN_ENCRYPTION_KEY keys opens" if settings.token_encryption_keys else \
            "they are encrypted and TOKEN_ENCRYPTION_KEY is not set"
        raise Failure(f"{unreadable} installation(s) cannot be decrypted: {held} (set the key they were "
                      "encrypted with; to rotate, put the new key first and keep the old one after it)")
    return EXIT_OK


def cmd_reindex(settings: Settings, args: argparse.Namespace) -> int:
    """The search index and every item's vector, rebuilt from the archive (vectors missing for the current
    model, or computed from an older text, are computed; stored ones of other models are dropped)."""
    store = open_archive(settings)
    started = time.monotonic()
    count, model = embed_archive(settings, store, sys.stderr.isatty() and not args.json, recompute=True)
    store.drop_item_vectors(model)
    seconds = time.monotonic() - started
    if args.json:
        out(json.dumps({"items": count, "model": model, "seconds": round(seconds, 1)}, ensure_ascii=False))
    else:
        out(f"reindexed {count:,} items ({model}) in {seconds:.1f} s")
    return EXIT_OK


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    """The bundled archive of real posts, loaded into a database that holds no real archive (bot.demo)."""
    from bot import demo

    result = demo.load(open_store(settings))
    out(json.dumps(result.as_json()) if args.json else result.line())
    return EXIT_OK
