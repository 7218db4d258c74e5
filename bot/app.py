"""Bolt wiring only: the `App`, its Web API client and its listeners (registered in `bot.listeners`).

Every Web API call goes to `SLACK_API_URL`. Request signatures are always verified in HTTP mode, twice:
by `bot.server.Router` before Bolt sees the request (which also turns away bodies Bolt cannot read), then by
Bolt's `RequestVerification`: unsigned, badly signed or stale requests get 401 before any listener runs.
Listeners run in the request thread (`process_before_response=True`): a fast command is answered in its ack,
and everything that may be slow (summaries through an API, the share button, App Home) runs as a lazy
listener on `executor`, which `bot.server` drains on shutdown; what calls the model endpoint runs on the model
lane (`bot.lanes`), its own small pool with per-person and per-workspace caps, drained the same way.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from slack_bolt import App
from slack_sdk import WebClient

from bot import listeners
from bot.commands import Services
from bot.config import Settings
from bot.lanes import ModelLane
from bot.search.index import SearchIndex, meaning_model
from bot.store import Store
from bot.summarize import Summarizer

log = logging.getLogger("bot.app")

LAZY_WORKERS = 8


def web_client(settings: Settings) -> WebClient:
    """The bot's Web API client, pointed at SLACK_API_URL. In OAuth mode it has no token: Bolt gives each
    request a client with its workspace's token, and the OAuth flow exchanges codes and refreshes tokens
    through this one."""
    token = None if settings.oauth_enabled else settings.slack_bot_token
    return WebClient(token=token, base_url=settings.slack_api_url, timeout=10)


def build_app(
    settings: Settings,
    store: Store,
    *,
    client: WebClient | None = None,
    executor: ThreadPoolExecutor | None = None,
    services: Services | None = None,
    model_lane: ModelLane | None = None,
) -> App:
    """The Bolt app with every listener registered. `services` (a `bot.commands.Services`) is built from
    the other arguments unless given; `model_lane` runs the work that calls the model (one is made unless
    given)."""
    client = client or web_client(settings)
    bolt_log = logging.getLogger("slack_bolt")
    level = bolt_log.level
    # Bolt also reads SLACK_BOT_TOKEN from the environment and warns that `client` wins over it; it does.
    bolt_log.setLevel(logging.ERROR)
    try:
        app = _app(settings, store, client, executor, bolt_log)
    finally:
        bolt_log.setLevel(level)
    listeners.register(app, services if services is not None else make_services(settings, store, client),
                       model_lane)
    return app


def _app(
    settings: Settings, store: Store, client: WebClient, executor: ThreadPoolExecutor | None,
    logger: logging.Logger,
) -> App:
    pool = executor or ThreadPoolExecutor(max_workers=LAZY_WORKERS, thread_name_prefix="lazy")
    secret = settings.slack_signing_secret or ""
    if settings.oauth_enabled:
        from bot.oauth import NetworkOAuthFlow, oauth_settings  # the OAuth boundary: in OAuth mode only

        # Multi-workspace: /slack/install and /slack/oauth_redirect run Bolt's OAuth flow (each install page's
        # state issued for the client's network); each request is authorized with its workspace's
        # installation (its token refreshed first when about to expire). The settings are given too, so Bolt
        # makes no default ones of its own from the environment.
        oauth = oauth_settings(settings, store, client)
        flow = NetworkOAuthFlow(client=client, logger=logger, settings=oauth)
        return App(client=client, signing_secret=secret, oauth_settings=oauth, oauth_flow=flow,
                   process_before_response=True, listener_executor=pool, logger=logger, name="mlresearch-bot")
    return App(
        client=client,
        signing_secret=secret,
        # No auth.test in Bolt: the first event resolves the bot user lazily, so `serve` starts offline;
        # `serve` asks auth.test once itself (bot.server.check_token): a refused token stops it, an
        # unreachable Slack is a warning.
        token_verification_enabled=False,
        process_before_response=True,
        listener_executor=pool,
        logger=logger,
        name="mlresearch-bot",
    )


def make_services(settings: Settings, store: Store, client: WebClient | None) -> Services:
    """The dependencies the command handlers get."""
    index = SearchIndex(store, model=meaning_model(settings))
    return Services(store=store, settings=settings, slack=client, summarizer=make_summarizer(settings),
                    index=index)


def make_summarizer(settings: Settings) -> Summarizer | None:
    """A Summarizer for the configured endpoint, or None (extractive summaries)."""
    if not settings.summary_enabled:
        return None
    return Summarizer.from_settings(settings)
