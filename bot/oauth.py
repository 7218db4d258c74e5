"""Multi-workspace install: Bolt's OAuth flow over our store.

With SLACK_CLIENT_ID and SLACK_CLIENT_SECRET set, `serve` answers `GET /slack/install` (a page with the
"Add to Slack" link; its `state` is issued here and bound to the browser by a cookie) and
`GET /slack/oauth_redirect` (Slack sends the installer back with a code: the state is consumed once, the code
exchanged through `oauth.v2.access`, the installation saved). Every Web API call, the code exchange and token
refreshes included, goes to SLACK_API_URL.

- `StoreInstallations`: slack_sdk's `InstallationStore` over `Store.save_installation`/`find_installation`/
  `delete_installation`. One installation per workspace, keyed by team id, kept as the JSON of
  `Installation.to_dict()` with its times as numbers.
- Enterprise Grid: the app is installed workspace by workspace (as `manifest.json` says:
  `org_deploy_enabled: false`). An org-wide install is refused at the redirect with a page that says so,
  and the token Slack issued for it is revoked: every workspace's subscriptions, follows and deliveries are
  keyed by its team, and an org-wide token would leave them all `not_installed`. Saving an installation (a new
  install, a reinstall, a rotated token) re-enables a workspace that delivery had disabled.
- Token rotation: when an installation has a refresh token, `find_installation` refreshes a bot token that
  expires within `ROTATE_MINUTES` (oauth.v2.access, grant_type=refresh_token) and saves the result, under a
  per-workspace lock, so Bolt's request path and the poller's deliveries share one refresh (a refresh token is
  good for one use).
- `StoreStates`: `OAuthStateStore` over `Store.issue_oauth_state`/`consume_oauth_state` (valid once, for
  `STATE_SECONDS`; expired states are deleted whenever one is issued; at most `STATE_CAP` are kept). Each
  state is issued for the client's network (`NetworkOAuthFlow`: a /24 or /64 `bot.server.Router` names) and
  starts with GROUP_DIGITS hex digits of its hash: past the cap, the network holding the most states gives
  up its oldest for a network holding fewer, and only when none can is the page refused (`InstallsBusy`).
  `bot.server` also limits install pages per network.
- `WorkspaceClients`: `client_for(team_id)` of the deliverer: each workspace posts with its own bot token; a
  workspace with no installation gets no client (its rows fail, `not_installed`), never another workspace's.
"""

from __future__ import annotations

import hashlib
import html
import inspect
import logging
import re
import secrets
import threading
from datetime import datetime, timedelta
from logging import Logger
from time import time
from typing import Any

from slack_bolt.authorization.authorize import InstallationStoreAuthorize
from slack_bolt.error import BoltError
from slack_bolt.oauth.callback_options import CallbackOptions, FailureArgs, SuccessArgs
from slack_bolt.oauth.oauth_flow import OAuthFlow
from slack_bolt.oauth.oauth_settings import OAuthSettings
from slack_bolt.request import BoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackTokenRotationError
from slack_sdk.oauth.installation_store import Bot, Installation, InstallationStore
from slack_sdk.oauth.state_store import OAuthStateStore
from slack_sdk.oauth.token_rotation import TokenRotator

from bot.config import Settings
from bot.errors import InstallsBusy, SecretError, StoreError, WorkspaceUnavailable
from bot.secrets_at_rest import TokenCipher, seal, unseal
from bot.slackweb import TRANSPORT_ERRORS, make_client
from bot.store import Store, utcnow

log = logging.getLogger("bot.oauth")

INSTALL_PATH = "/slack/install"
REDIRECT_PATH = "/slack/oauth_redirect"
STATE_SECONDS = 600
STATE_CAP = 1_000  # OAuth states kept at most (see StoreStates)
GROUP_DIGITS = 12  # hex digits of a state naming the network it was issued for
# The client's network (/24 or /64) on an install page's request: set by bot.server.Router, never by a client.
NETWORK_HEADER = "x-mlresearch-network"
ROTATE_MINUTES = 120  # refresh a bot token this long before it expires (Slack's tokens live 12 hours)

_REASON = re.compile(r"[a-z][a-z0-9_]{0,59}")
_INSTALLATION_FIELDS = frozenset(inspect.signature(Installation.__init__).parameters) - {"self"}
_TIME_FIELDS = {"bot_token_expires_at": int, "user_token_expires_at": int, "installed_at": float}
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def api_client(settings: Settings) -> WebClient:
    """A tokenless Web API client on SLACK_API_URL, for oauth.v2.access (install and token refresh)."""
    template = make_client("", settings.slack_api_url)  # the same retries as every other client
    return WebClient(token=None, base_url=settings.slack_api_url, timeout=template.timeout,
                     retry_handlers=template.retry_handlers)


# --- installations ---------------------------------------------------------------------------------------


def installation_key(team_id: str | None, enterprise_id: str | None,
                     is_enterprise_install: bool | None = False) -> tuple[str | None, str | None]:
    """(team_id, enterprise_id) as the store keys them: a workspace by its team id alone (team ids are unique,
    also inside an Enterprise Grid, and deliveries know only the team), an org-wide install by its enterprise
    id."""
    if is_enterprise_install or not team_id:
        return None, enterprise_id
    return team_id, None


def to_record(installation: Installation) -> dict[str, Any]:
    """The JSON-able dict the store keeps: `Installation.to_dict()` with its times as Unix timestamps."""
    record = installation.to_dict()
    for name in _TIME_FIELDS:
        value = record.get(name)
        if isinstance(value, datetime):
            record[name] = value.timestamp()
    return record


def from_record(record: dict[str, Any]) -> Installation:
    """The `Installation` a stored dict holds (unknown keys become custom values)."""
    known = {k: v for k, v in record.items() if k in _INSTALLATION_FIELDS and k != "custom_values"}
    custom = {k: v for k, v in record.items() if k not in _INSTALLATION_FIELDS}
    custom.update(record.get("custom_values") or {})
    for name, kind in _TIME_FIELDS.items():
        if known.get(name) is not None:
            known[name] = kind(known[name])
    for name in ("bot_scopes", "user_scopes"):
        if known.get(name) is None:
            known[name] = ""
    known.setdefault("user_id", "")
    return Installation(**known, custom_values=custom)


def _lock(key: tuple[str | None, str | None]) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(f"{key[1] or '-'}:{key[0] or '-'}", threading.Lock())


def _expiring(installation: Installation, minutes: int) -> bool:
    expires = installation.bot_token_expires_at
    return bool(installation.bot_refresh_token) and expires is not None and expires <= time() + minutes * 60


class OrgWideInstall(BoltError):
    """An org-wide (Enterprise Grid) install, which this app does not take: install it in each workspace."""


ORG_WIDE_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>mlresearch-bot</title></head><body>
<h2>Install mlresearch-bot in each workspace</h2>
<p>This app is installed workspace by workspace, not across a whole Enterprise Grid organization, so nothing
was installed. Please <a href="{install}">install it from a workspace</a> (an organization admin can also add
it to chosen workspaces from the admin dashboard).</p></body></html>"""


class StoreInstallations(InstallationStore):
    """slack_sdk's InstallationStore over our store; refreshes expiring bot tokens when `rotator` is set, and
    seals installations with `cipher` (TOKEN_ENCRYPTION_KEY) when there is one (bot.secrets_at_rest). An
    org-wide install is not saved (OrgWideInstall); its token is revoked through `client` when given."""

    def __init__(self, store: Store, *, rotator: TokenRotator | None = None,
                 rotate_minutes: int = ROTATE_MINUTES, cipher: TokenCipher | None = None,
                 client: WebClient | None = None) -> None:
        self.store = store
        self.rotator = rotator
        self.rotate_minutes = rotate_minutes
        self.cipher = cipher
        self.client = client

    @property
    def logger(self) -> Logger:
        return log

    # saving -------------------------------------------------------------------------------------------

    def save(self, installation: Installation) -> None:
        if installation.is_enterprise_install:
            self._refuse_org_wide(installation)
        team_id, enterprise_id = installation_key(installation.team_id, installation.enterprise_id,
                                                  installation.is_enterprise_install)
        try:
            self.store.save_installation(team_id, enterprise_id, seal(to_record(installation), self.cipher))
            if team_id:  # a fresh token: delivery to this workspace may resume
                self.store.enable_workspace(team_id)
        except StoreError as exc:  # Bolt shows its "storage_error" page for a BoltError
            log.error("event=installation_save_failed team=%s error=%s", team_id or enterprise_id,
                      " ".join(str(exc).split())[:200])
            raise BoltError(f"could not save the installation: {exc}") from exc

    def _refuse_org_wide(self, installation: Installation) -> None:
        """Revoke the token of an org-wide install (so Slack does not keep it installed) and refuse it."""
        revoked = "no"
        if self.client is not None and installation.bot_token:
            try:
                self.client.auth_revoke(token=installation.bot_token)
                revoked = "yes"
            except SlackApiError as exc:
                revoked = str(exc.response.get("error") or "unknown_error")[:60]
            except TRANSPORT_ERRORS as exc:
                revoked = type(exc).__name__
        log.warning("event=install_refused reason=org_wide enterprise=%s revoked=%s",
                    installation.enterprise_id or "-", revoked)
        raise OrgWideInstall("org-wide installs are not supported: install the app in each workspace")

    def save_bot(self, bot: Bot) -> None:
        current = self._load(installation_key(bot.team_id, bot.enterprise_id, bot.is_enterprise_install))
        record: dict[str, Any] = to_record(current) if current is not None else {"user_id": ""}
        record.update({
            "app_id": bot.app_id, "enterprise_id": bot.enterprise_id, "enterprise_name": bot.enterprise_name,
            "team_id": bot.team_id, "team_name": bot.team_name, "bot_token": bot.bot_token,
            "bot_id": bot.bot_id, "bot_user_id": bot.bot_user_id,
            "bot_scopes": ",".join(bot.bot_scopes or []),
            "bot_refresh_token": bot.bot_refresh_token, "bot_token_expires_at": bot.bot_token_expires_at,
            "is_enterprise_install": bot.is_enterprise_install,
        })
        self.save(from_record(record))

    # finding ------------------------------------------------------------------------------------------

    def find_installation(self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None,
                          is_enterprise_install: bool | None = False) -> Installation | None:
        key = installation_key(team_id, enterprise_id, is_enterprise_install)
        try:
            installation = self.installation(key)
        except SecretError as exc:
            log.error("event=installation_unreadable team=%s error=%r", key[0] or key[1], str(exc))
            return None
        if installation is None or (user_id is not None and installation.user_id != user_id):
            return None  # one installation per workspace: the bot's (we ask for no user scopes)
        return installation

    def installation(self, key: tuple[str | None, str | None]) -> Installation | None:
        """The installation at `key` (see `installation_key`), its bot token refreshed first when it is about
        to expire. Raises SecretError when it is sealed and cannot be opened."""
        installation = self._load(key)
        if installation is not None and self.rotator is not None and _expiring(installation,
                                                                                self.rotate_minutes):
            installation = self._rotate(key)
        return installation

    def find_bot(self, *, enterprise_id: str | None, team_id: str | None,
                 is_enterprise_install: bool | None = False) -> Bot | None:
        installation = self.find_installation(enterprise_id=enterprise_id, team_id=team_id,
                                              is_enterprise_install=is_enterprise_install)
        if installation is None or not installation.bot_token:
            return None
        return installation.to_bot()

    def _load(self, key: tuple[str | None, str | None]) -> Installation | None:
        record = self.store.find_installation(*key)
        return from_record(unseal(record, self.cipher)) if record is not None else None

    def _rotate(self, key: tuple[str | None, str | None]) -> Installation | None:
        """Refresh the bot token of the installation at `key` if it is still expiring once we hold the lock
        (another thread may have refreshed it meanwhile). Raises SlackTokenRotationError when Slack refuses;
        a broken connection keeps the current token (it may still be valid) and is logged."""
        assert self.rotator is not None
        with _lock(key):
            installation = self._load(key)
            if installation is None or not _expiring(installation, self.rotate_minutes):
                return installation
            where = key[0] or key[1]
            try:
                rotated = self.rotator.perform_token_rotation(installation=installation,
                                                              minutes_before_expiration=self.rotate_minutes)
            except SlackTokenRotationError as exc:
                error = exc.api_error.response.get("error") if exc.api_error is not None else None
                log.error("event=token_rotation_failed team=%s error=%s", where, error or "unknown_error")
                raise
            except TRANSPORT_ERRORS as exc:
                log.warning("event=token_rotation_failed team=%s error=%s detail=\"kept the current token\"",
                            where, type(exc).__name__)
                return installation
            if rotated is None:
                return installation
            self.save(rotated)
            log.info("event=token_rotated team=%s expires_in=%d", where,
                     int((rotated.bot_token_expires_at or time()) - time()))
            return rotated

    # deleting -----------------------------------------------------------------------------------------

    def delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        self.store.delete_installation(*installation_key(team_id, enterprise_id))

    def delete_installation(self, *, enterprise_id: str | None, team_id: str | None,
                            user_id: str | None = None) -> None:
        key = installation_key(team_id, enterprise_id)
        if user_id is None:
            self.store.delete_installation(*key)
            return
        try:
            installation = self._load(key)  # only that user's token goes; the bot stays
        except SecretError as exc:
            log.error("event=installation_unreadable team=%s error=%r", key[0] or key[1], str(exc))
            return
        if installation is not None and installation.user_id == user_id and installation.user_token:
            installation.user_token = installation.user_refresh_token = None
            installation.user_token_expires_at = None
            installation.user_scopes = []
            self.save(installation)


def reseal_installations(store: Store, cipher: TokenCipher | None) -> tuple[int, int]:
    """Seal every stored installation with the cipher's first key: after TOKEN_ENCRYPTION_KEY is first set
    (plain rows), or when a new key has been put first (rotation). Returns (resealed, unreadable): an
    installation none of the keys opens (or a sealed one, without a cipher) is left as it is. Without a
    cipher nothing is rewritten; the sealed installations are counted."""
    unreadable = 0

    def reseal(data: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal unreadable
        try:
            opened = unseal(data, cipher)
        except SecretError:
            unreadable += 1
            return None
        return seal(opened, cipher) if cipher is not None else None

    return store.rewrite_installations(reseal), unreadable


# --- OAuth state -----------------------------------------------------------------------------------------


class StoreStates(OAuthStateStore):
    """OAuth `state` values in our store: each valid once, for `expiration_seconds`. Issuing one deletes the
    expired ones; at most `cap` are kept. Each state is issued for the client's network
    (`issue(network=...)`, see `NetworkOAuthFlow`), as a group of the table: when it is full, the network
    holding the most states gives up its oldest one, if it holds at least two more than the client's network
    (`Store.issue_oauth_state`), so no network can keep the others out; past that, `issue` raises InstallsBusy
    (an install in progress from a network holding no more than others keeps its state)."""

    def __init__(self, store: Store, expiration_seconds: int = STATE_SECONDS, *,
                 cap: int = STATE_CAP) -> None:
        self.store = store
        self.expiration_seconds = expiration_seconds
        self.cap = cap

    @property
    def logger(self) -> Logger:
        return log

    def issue(self, *args: Any, network: str | None = None, **kwargs: Any) -> str:
        group = hashlib.sha256(network.encode()).hexdigest()[:GROUP_DIGITS] if network else None
        token = secrets.token_urlsafe(24)  # letters, digits, - and _: never a dot
        state = f"{group}.{token}" if group else token
        expires = utcnow() + timedelta(seconds=self.expiration_seconds)
        if not self.store.issue_oauth_state(state, expires, cap=self.cap, group=group):
            log.warning("event=install_refused reason=states_full cap=%d", self.cap)
            raise InstallsBusy("too many installs are in progress; try again in a few minutes")
        return state

    def consume(self, state: str) -> bool:
        try:
            return bool(state) and self.store.consume_oauth_state(state)
        except StoreError as exc:
            log.error("event=oauth_state_failed error=%s", " ".join(str(exc).split())[:200])
            return False


# --- Bolt wiring -----------------------------------------------------------------------------------------


def rotator(settings: Settings, client: WebClient) -> TokenRotator:
    assert settings.slack_client_id and settings.slack_client_secret
    return TokenRotator(client_id=settings.slack_client_id, client_secret=settings.slack_client_secret,
                        client=client)


def oauth_settings(settings: Settings, store: Store, client: WebClient) -> OAuthSettings:
    """Bolt's OAuth settings: our installation and state stores, the configured scopes, and a token rotator
    and authorizer whose calls go through `client` (SLACK_API_URL)."""
    installations = StoreInstallations(store, rotator=rotator(settings, client),
                                       cipher=TokenCipher.of(settings.token_encryption_keys), client=client)
    bolt_logger = logging.getLogger("slack_bolt.oauth")
    oauth = OAuthSettings(
        client_id=settings.slack_client_id,
        client_secret=settings.slack_client_secret,
        scopes=list(settings.slack_scopes),
        user_scopes=[],
        install_path=INSTALL_PATH,
        redirect_uri_path=REDIRECT_PATH,
        installation_store=installations,
        installation_store_bot_only=False,
        token_rotation_expiration_minutes=ROTATE_MINUTES,
        state_store=StoreStates(store),
        state_expiration_seconds=STATE_SECONDS,
        callback_options=CallbackOptions(success=_installed, failure=_install_failed),
        logger=bolt_logger,
    )
    # OAuthSettings' own authorizer would refresh tokens through slack.com; ours goes through `client`.
    oauth.authorize = authorizer(oauth, installations, client)
    return oauth


class NetworkOAuthFlow(OAuthFlow):
    """Bolt's OAuth flow, issuing each install page's state for the client's network: the NETWORK_HEADER that
    `bot.server.Router` sets on /slack/install from the connecting address (it drops any such header a client
    sends)."""

    def issue_new_state(self, request: BoltRequest) -> str:
        network = (request.headers.get(NETWORK_HEADER) or [""])[0]
        states = self.settings.state_store
        if isinstance(states, StoreStates):
            return states.issue(network=network or None)
        return states.issue()


def authorizer(oauth: OAuthSettings, installations: StoreInstallations,
               client: WebClient) -> InstallationStoreAuthorize:
    return InstallationStoreAuthorize(
        logger=logging.getLogger("slack_bolt.authorize"),
        installation_store=installations,
        client_id=oauth.client_id,
        client_secret=oauth.client_secret,
        token_rotation_expiration_minutes=ROTATE_MINUTES,
        # auth.test once per token, not once per request (a rotated or new token is a new key; a removed
        # installation has no token to look up)
        cache_enabled=True,
        client=client,
    )


def _installed(args: SuccessArgs) -> BoltResponse:
    installation = args.installation
    log.info("event=installed team=%s enterprise=%s scopes=%s rotation=%s",
             installation.team_id or "-", installation.enterprise_id or "-",
             ",".join(installation.bot_scopes or []) or "-",
             "on" if installation.bot_refresh_token else "off")
    return args.default.success(args)


def _install_failed(args: FailureArgs) -> BoltResponse:
    if isinstance(args.error, OrgWideInstall):  # logged when refused; a page that says what to do instead
        page = ORG_WIDE_PAGE.format(install=html.escape(INSTALL_PATH))
        return BoltResponse(status=400, body=page, headers={"Content-Type": "text/html; charset=utf-8"})
    # Bolt's own reasons, or Slack's `error` from the redirect's query string (access_denied...): anyone can
    # put any text there, so a reason that is not one word of Slack's alphabet is logged as `unrecognized`.
    reason = args.reason if _REASON.fullmatch(args.reason or "") else "unrecognized"
    log.warning("event=install_failed reason=%s status=%d", reason, args.suggested_status_code)
    return args.default.failure(args)


# --- delivery ------------------------------------------------------------------------------------------


class WorkspaceClients:
    """`client_for(team_id)` for the deliverer in OAuth mode: a client with that workspace's bot token,
    refreshed first when it is about to expire. Raises `bot.errors.WorkspaceUnavailable` when the workspace
    has no installation (its deliveries fail with the reason; another workspace's token is never used), or
    when Slack refuses to refresh its token (the workspace is disabled until it is reinstalled)."""

    def __init__(self, store: Store, settings: Settings, *, client: WebClient | None = None) -> None:
        api = client or api_client(settings)
        self.installations = StoreInstallations(store, rotator=rotator(settings, api),
                                                cipher=TokenCipher.of(settings.token_encryption_keys))
        self.api_url = settings.slack_api_url

    def __call__(self, team_id: str) -> WebClient:
        try:
            installation = self.installations.installation(installation_key(team_id, None))
        except SecretError as exc:
            raise WorkspaceUnavailable(f"installation_unreadable: {exc}") from None
        except SlackTokenRotationError as exc:
            error = exc.api_error.response.get("error") if exc.api_error is not None else None
            reason = f"token_rotation_failed: {error or 'unknown_error'}"
            raise WorkspaceUnavailable(reason, disable=True) from None
        if installation is None or not installation.bot_token:
            raise WorkspaceUnavailable(f"not_installed: no installation for this workspace (install the app "
                                       f"at {INSTALL_PATH})")
        return make_client(installation.bot_token, self.api_url)
