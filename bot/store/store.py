"""`Store`: the store's one interface, composed of focused parts over one connection/session layer.

    part (module)                    holds
    base.StoreBase                   connections, write transactions, sessions, the hooks a backend fills
    archive.ArchiveMixin             items and aliases: ingest/preview (the per-feed baseline), add_items,
                                     merge_index/preview_index (enrichment), queue_after_ingest (routes
                                     decided by authors enrichment found), get_item(s), latest, count_items,
                                     all_items, change_marker, changed_items
    feed_state.FeedStateMixin        feed state (validators, errors, baseline) and meta
    demo.DemoMixin                   the bundled demo archive: loaded into an empty archive, replaced by the
                                     first real poll or backfill (never mixed with real items)
    subscriptions.SubscriptionsMixin subscriptions and workspaces; the audience `bot.route` reads
    ledger.LedgerMixin               the delivery ledger: queue (as routed), claim, settle (sent, failed,
                                     released)
    follows.FollowsMixin             people's follows and reading lists (saved items)
    installations.InstallationsMixin installations and OAuth state (multi-workspace mode)
    digests.DigestsMixin             digest schedules, the items waiting for a digest, the digest ledger
    conversations.ConversationsMixin questions asked in Slack: claimed before answering, understood for
                                     the thread's follow-ups
    vectors.VectorsMixin             items' vectors for search by meaning, per embedding model
    agent.AgentMixin                 the Messages tab: greetings, what people look at, feedback on answers
    workers.WorkersMixin             worker heartbeats, channel claims with leases, shared 429 holds
    pages.PagesMixin                 items' own pages: which to read next, what each said (paper, code,
                                     venue), the follow-up replies a later finding queues in the ledger
    trending.TrendingMixin           what a workspace saved, liked and opened through Related (counts only)

A new feature touches the part it concerns; every part speaks SQL both backends share (`?` placeholders,
`ON CONFLICT`, `IS DISTINCT FROM`). A backend (`SQLiteStore`, `PostgresStore`) subclasses `Store`.
"""

from __future__ import annotations

from bot.store.agent import AgentMixin
from bot.store.archive import ArchiveMixin
from bot.store.conversations import ConversationsMixin
from bot.store.demo import DemoMixin
from bot.store.digests import DigestsMixin
from bot.store.feed_state import FeedStateMixin
from bot.store.follows import FollowsMixin
from bot.store.installations import InstallationsMixin
from bot.store.ledger import LedgerMixin
from bot.store.pages import PagesMixin
from bot.store.subscriptions import SubscriptionsMixin
from bot.store.trending import TrendingMixin
from bot.store.vectors import VectorsMixin
from bot.store.workers import WorkersMixin


class Store(ArchiveMixin, FeedStateMixin, SubscriptionsMixin, LedgerMixin, InstallationsMixin, DigestsMixin,
            FollowsMixin, ConversationsMixin, VectorsMixin, AgentMixin,
            WorkersMixin, DemoMixin, PagesMixin, TrendingMixin):
    """The store's interface (see the module docstring); build one with `bot.store.open_store(url)`."""
