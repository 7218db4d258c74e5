"""People's follows (keywords that bring them a direct message per matching new item) and reading lists
(saved items), per person and per workspace (a part of `Store`). A follow's direct messages are rows of the
delivery ledger (target 'person'), routed by `bot.route` and queued at ingest."""

from __future__ import annotations

from collections.abc import Sequence

from bot.models import MAX_KEYWORDS, SavedItem
from bot.store.archive import ITEM_COLUMNS
from bot.store.base import StoreBase
from bot.store.conn import Conn
from bot.store.models import from_iso, iso, row_item, utcnow

# m012_follows_saved, the same on both backends: `follows` (a person's keywords, per workspace), `saved_items`
# (a person's reading list), and `deliveries.target`: 'person' for a follow's direct message (its channel_id
# is then the person's user ID), 'channel' for every other row.
FOLLOWS_DDL = (
    "CREATE TABLE follows (team_id TEXT NOT NULL, user_id TEXT NOT NULL, keyword TEXT NOT NULL, "
    "created_at TEXT NOT NULL, PRIMARY KEY (team_id, user_id, keyword))",
    "CREATE TABLE saved_items (team_id TEXT NOT NULL, user_id TEXT NOT NULL, item_id TEXT NOT NULL, "
    "saved_at TEXT NOT NULL, PRIMARY KEY (team_id, user_id, item_id))",
    "CREATE INDEX saved_items_by_person ON saved_items (team_id, user_id, saved_at)",
    "ALTER TABLE deliveries ADD COLUMN target TEXT NOT NULL DEFAULT 'channel'",
)
MAX_FOLLOWS = MAX_KEYWORDS  # keywords one person follows in one workspace
MAX_SAVED = 500  # items in one person's reading list


class FollowsMixin(StoreBase):
    """Follows and saved items, each keyed by (team_id, user_id)."""

    # follows ----------------------------------------------------------------------------------------------

    def follow(self, team_id: str, user_id: str, keywords: Sequence[str]) -> tuple[list[str], list[str]]:
        """Follow `keywords` (already normalized, `bot.search.match.split_keywords`). Returns (the ones added,
        the ones left out because the person already follows MAX_FOLLOWS keywords). Following a keyword
        again changes nothing."""
        now = iso(utcnow())
        added: list[str] = []
        with self._write() as db:
            have = _follows(db, team_id, user_id)
            room = MAX_FOLLOWS - len(have)
            fresh = [k for k in dict.fromkeys(keywords) if k not in have]
            added, over = fresh[: max(room, 0)], fresh[max(room, 0) :]
            db.executemany(
                "INSERT INTO follows (team_id, user_id, keyword, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                [[team_id, user_id, keyword, now] for keyword in added],
            )
        return added, over

    def unfollow(self, team_id: str, user_id: str, keywords: Sequence[str] = ()) -> list[str]:
        """Stop following `keywords` (none: every keyword). Returns the keywords removed. Direct messages
        already queued for items that arrived while they were followed are still sent, unless the person
        now follows nothing."""
        with self._write() as db:
            have = _follows(db, team_id, user_id)
            gone = [k for k in have if not keywords or k in keywords]
            db.executemany(
                "DELETE FROM follows WHERE team_id = ? AND user_id = ? AND keyword = ?",
                [[team_id, user_id, keyword] for keyword in gone],
            )
            if gone and len(gone) == len(have):
                db.execute(
                    "UPDATE deliveries SET state = 'failed', error = 'unfollowed', updated_at = ? "
                    "WHERE team_id = ? AND channel_id = ? AND target = 'person' AND state = 'pending'",
                    [iso(utcnow()), team_id, user_id],
                )
        return gone

    def follows(self, team_id: str, user_id: str) -> list[str]:
        """The keywords a person follows in a workspace, in alphabetical order."""
        with self.connect() as db:
            return _follows(db, team_id, user_id)

    def followers(self) -> set[tuple[str, str]]:
        """Every (team_id, user_id) that follows at least one keyword."""
        with self.connect() as db:
            rows = db.rows("SELECT DISTINCT team_id, user_id FROM follows")
        return {(r["team_id"], r["user_id"]) for r in rows}

    # the reading list -------------------------------------------------------------------------------------

    def save_item(self, team_id: str, user_id: str, item_id: str) -> str:
        """Put an archived item on a person's reading list: 'saved', 'already' (it was there), 'missing' (no
        such item in the archive) or 'full' (MAX_SAVED items already)."""
        with self._write() as db:
            if db.one("SELECT 1 FROM items WHERE id = ?", [item_id]) is None:
                return "missing"
            if db.one(
                "SELECT 1 FROM saved_items WHERE team_id = ? AND user_id = ? AND item_id = ?",
                [team_id, user_id, item_id],
            ) is not None:
                return "already"
            if _count_saved(db, team_id, user_id) >= MAX_SAVED:
                return "full"
            db.execute(
                "INSERT INTO saved_items (team_id, user_id, item_id, saved_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                [team_id, user_id, item_id, iso(utcnow())],
            )
        return "saved"

    def unsave_item(self, team_id: str, user_id: str, item_id: str) -> bool:
        """Take an item off a person's reading list. False if it was not there."""
        with self._write() as db:
            cursor = db.execute(
                "DELETE FROM saved_items WHERE team_id = ? AND user_id = ? AND item_id = ?",
                [team_id, user_id, item_id],
            )
            return bool(cursor.rowcount > 0)

    def saved_items(self, team_id: str, user_id: str, limit: int = MAX_SAVED) -> list[SavedItem]:
        """A person's reading list, the most recently saved first (items no longer archived are left out)."""
        sql = (
            f"SELECT {ITEM_COLUMNS}, saved_items.saved_at FROM saved_items "
            "JOIN items ON items.id = saved_items.item_id WHERE saved_items.team_id = ? "
            "AND saved_items.user_id = ? ORDER BY saved_items.saved_at DESC, items.pk DESC LIMIT ?"
        )
        with self.connect() as db:
            rows = db.rows(sql, [team_id, user_id, limit])
        saved = []
        for r in rows:
            at = from_iso(r["saved_at"])
            assert at is not None
            saved.append(SavedItem(row_item(r), at))
        return saved

    def saved_by(self, user_id: str) -> list[tuple[str, SavedItem]]:
        """`user_id`'s reading lists in every workspace that has one: (team_id, saved item), the most
        recently saved first (items no longer archived are left out)."""
        sql = (
            f"SELECT {ITEM_COLUMNS}, saved_items.team_id, saved_items.saved_at FROM saved_items "
            "JOIN items ON items.id = saved_items.item_id WHERE saved_items.user_id = ? "
            "ORDER BY saved_items.saved_at DESC, items.pk DESC, saved_items.team_id"
        )
        with self.connect() as db:
            rows = db.rows(sql, [user_id])
        saved = []
        for r in rows:
            at = from_iso(r["saved_at"])
            assert at is not None
            saved.append((str(r["team_id"]), SavedItem(row_item(r), at)))
        return saved

    def count_saved(self, team_id: str, user_id: str) -> int:
        with self.connect() as db:
            return _count_saved(db, team_id, user_id)


def _follows(db: Conn, team_id: str, user_id: str) -> list[str]:
    rows = db.rows(
        "SELECT keyword FROM follows WHERE team_id = ? AND user_id = ? ORDER BY keyword",
        [team_id, user_id],
    )
    return [r["keyword"] for r in rows]


def _count_saved(db: Conn, team_id: str, user_id: str) -> int:
    row = db.one(
        "SELECT count(*) FROM saved_items JOIN items ON items.id = saved_items.item_id "
        "WHERE saved_items.team_id = ? AND saved_items.user_id = ?",
        [team_id, user_id],
    )
    return int(row[0])

