"""Slack's side of a multi-workspace install, on top of tests/fakes/slack_api.py: `oauth.v2.access` (a code
for a bot token, and with token rotation a refresh token for a new one) and an `auth.test` that knows which
workspace each token belongs to.

    workspaces = SlackWorkspaces(slack, CLIENT_ID, CLIENT_SECRET)
    code = workspaces.code_for("T0A")                 # what Slack puts on the redirect after "Allow"
    ... GET /slack/oauth_redirect?code=<code>&state=<state>
    workspaces.token_of("T0A")                        # the bot token it handed out

The client id and secret must come as HTTP Basic auth (as slack_sdk sends them); a code is good once; a
refresh token is good once and replaced by a new one; tokens revoked with `revoke(team)` (or auth.revoke)
fail auth.test. `code_for(org, org_wide=True)` is an Enterprise Grid org-wide install.
"""

from __future__ import annotations

import base64
import itertools
import threading
from typing import Any

from bot.config import DEFAULT_SLACK_SCOPES
from tests.fakes.slack_api import Call, FakeSlack

APP_ID = "A0MLRESEARCH"
INSTALLER = "U0INSTALLER"
SCOPES = ",".join(DEFAULT_SLACK_SCOPES)  # what the install asked for (the manifest's scopes) is granted


class SlackWorkspaces:
    def __init__(self, slack: FakeSlack, client_id: str, client_secret: str) -> None:
        self.slack = slack
        self.client_id = client_id
        self.client_secret = client_secret
        self.codes: dict[str, tuple[str, int | None]] = {}  # code -> (team, expires_in for rotation)
        self.tokens: dict[str, str] = {}  # bot token -> team (valid tokens)
        self.refresh_tokens: dict[str, str] = {}  # refresh token -> team (each good once)
        self.latest: dict[str, str] = {}  # team -> the newest bot token handed out
        self.refreshes: list[str] = []  # teams whose token was refreshed, in order
        self.org_codes: set[str] = set()  # codes of org-wide installs (code_for(..., org_wide=True))
        self._serial = itertools.count(1)
        self._lock = threading.Lock()
        slack.handlers["oauth.v2.access"] = self._access
        slack.handlers["auth.test"] = self._auth_test
        slack.handlers["auth.revoke"] = self._auth_revoke

    # scripting ----------------------------------------------------------------------------------------

    def code_for(self, team_id: str, *, expires_in: int | None = None, org_wide: bool = False) -> str:
        """A one-time code for installing into `team_id`; with `expires_in`, the token rotates; `org_wide`:
        an Enterprise Grid org-wide install, `team_id` being the enterprise's id (no team)."""
        with self._lock:
            code = f"code-{team_id}-{next(self._serial)}"
            self.codes[code] = (team_id, expires_in)
            if org_wide:
                self.org_codes.add(code)
            return code

    def issue(self, team_id: str, *, rotating: bool = False) -> tuple[str, str | None]:
        """A valid bot token for `team_id` (and a refresh token when `rotating`), as an install would give."""
        return self._new_token(team_id), (self._new_refresh_token(team_id) if rotating else None)

    def token_of(self, team_id: str) -> str:
        return self.latest[team_id]

    def refresh_token_of(self, team_id: str) -> str:
        return next(r for r, team in self.refresh_tokens.items() if team == team_id)

    def revoke(self, team_id: str) -> None:
        with self._lock:
            self.tokens = {t: team for t, team in self.tokens.items() if team != team_id}
            self.refresh_tokens = {r: team for r, team in self.refresh_tokens.items() if team != team_id}

    def secrets(self) -> list[str]:
        """Every token and refresh token handed out (none may ever appear in a log)."""
        with self._lock:
            return [*self.latest.values(), *self.tokens, *self.refresh_tokens]

    # the methods --------------------------------------------------------------------------------------

    def _client_ok(self, call: Call) -> bool:
        auth = call.headers.get("Authorization") or call.headers.get("authorization") or ""
        if not auth.startswith("Basic "):
            return False
        decoded = base64.b64decode(auth[len("Basic "):]).decode()
        return decoded == f"{self.client_id}:{self.client_secret}"

    def _access(self, call: Call) -> dict[str, Any]:
        if not self._client_ok(call):
            return {"ok": False, "error": "invalid_client_id"}
        if call.params.get("grant_type") == "refresh_token":
            return self._refresh(str(call.params.get("refresh_token") or ""))
        code = str(call.params.get("code") or "")
        with self._lock:
            team_id, expires_in = self.codes.pop(code, (None, None))
        if team_id is None:
            return {"ok": False, "error": "invalid_code"}
        if code in self.org_codes:
            return {"ok": True, "app_id": APP_ID, "authed_user": {"id": INSTALLER}, "scope": SCOPES,
                    "token_type": "bot", "access_token": self._new_token(team_id),
                    "bot_user_id": f"UBOT{team_id}", "team": None,
                    "enterprise": {"id": team_id, "name": f"Org {team_id}"}, "is_enterprise_install": True}
        answer: dict[str, Any] = {
            "ok": True, "app_id": APP_ID, "authed_user": {"id": INSTALLER}, "scope": SCOPES,
            "token_type": "bot", "access_token": self._new_token(team_id), "bot_user_id": f"UBOT{team_id}",
            "team": {"id": team_id, "name": f"Workspace {team_id}"}, "enterprise": None,
            "is_enterprise_install": False,
        }
        if expires_in is not None:
            answer.update(refresh_token=self._new_refresh_token(team_id), expires_in=expires_in)
        return answer

    def _refresh(self, refresh_token: str) -> dict[str, Any]:
        with self._lock:
            team_id = self.refresh_tokens.pop(refresh_token, None)
        if team_id is None:
            return {"ok": False, "error": "invalid_refresh_token"}
        self.refreshes.append(team_id)
        return {"ok": True, "app_id": APP_ID, "scope": SCOPES, "token_type": "bot",
                "access_token": self._new_token(team_id), "refresh_token": self._new_refresh_token(team_id),
                "expires_in": 43200, "bot_user_id": f"UBOT{team_id}", "team": {"id": team_id}}

    def _auth_test(self, call: Call) -> dict[str, Any]:
        team_id = self.tokens.get(call.token or "")
        if team_id is None:
            return {"ok": False, "error": "invalid_auth"}
        return {"ok": True, "url": f"https://{team_id.lower()}.slack.com/", "team": f"Workspace {team_id}",
                "user": "mlresearch", "team_id": team_id, "user_id": f"UBOT{team_id}",
                "bot_id": f"B{team_id}", "is_enterprise_install": False}

    def _auth_revoke(self, call: Call) -> dict[str, Any]:
        with self._lock:
            team_id = self.tokens.pop(call.token or "", None)
        if team_id is None:
            return {"ok": False, "error": "invalid_auth"}
        return {"ok": True, "revoked": True}

    def _new_token(self, team_id: str) -> str:
        with self._lock:
            token = f"xoxb-{team_id}-{next(self._serial)}-secret"
            self.tokens[token] = team_id
            self.slack.bots[token] = (f"UBOT{team_id}", f"B{team_id}")  # its posts: as auth.test says
            self.latest[team_id] = token
            return token

    def _new_refresh_token(self, team_id: str) -> str:
        with self._lock:
            token = f"xoxe-1-{team_id}-{next(self._serial)}-refresh"
            self.refresh_tokens[token] = team_id
            return token
