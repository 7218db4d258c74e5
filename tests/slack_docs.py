"""Slack's documented example payloads (tests/data/slack/*.txt), loaded, and the few rewrites a test may make.

Each file is a header of `key: value` lines (`source`: the page, `retrieved`, `shows`, `note`), a line `---`,
then the example as the page shows it, untouched. `shows` says what it is: `envelope` (an Events API
`event_callback` body), `event` (the inner event only), `payload` (an interactivity payload), `form` (a slash
command's form, one field a line), all four sent by Slack to the app (SENT_BY_SLACK); or `response` (a Web
API answer) or `request` (a Web API method's argument, as the app sends it).

What `parsed` corrects so the examples load (each example's `note` says which it needs):
- a trailing comma before `}` or `]` (the `authorizations` of most event pages): dropped;
- `...` standing for elided fields (app_home_opened's `blocks`, block_actions' `message`): `[...]` and `{...}`
  become empty, a line holding only `...` is dropped;
- a form shown one field a line, each after the first starting with `&`: the lines joined.

`envelope(name)` puts an inner-event-only example (`shows: event`) into the documented envelope
(event_callback.txt, docs.slack.dev's event object), whose `event` it replaces; nothing else in it changes.

What a test may rewrite, only through the functions below (every rewrite is named where it happens), and why:
- `mention_for(bot_user)`: app_mention's `<@U0LAN0Z89>` names the docs' bot; the test's bot is another user;
- `shared_links(urls)`: link_shared's links point at example.com; the first two become links to archive items
  (the third, another host, is kept: it is left to Slack);
- `left_by(user)`: member_left_channel's W123ABC456 becomes the bot, to test the bot itself leaving;
- `on_tab(tab)`: app_home_opened shows the Home tab; "messages" is the other value Slack documents for `tab`
  (the Messages tab has no published view, so `view` goes);
- `click(element, ...)`: block_actions' `actions[0]` (a "View" button the docs made up) becomes the action
  Slack sends for one of our elements (its action_id, block_id, value and text, the docs' action_ts; for a
  static select, the option chosen as `selected_option` with the menu's `placeholder`, the fields the
  block_actions page and bolt-js's StaticSelectAction name for a choice in a select menu);
  optionally the channel, message and team the click happened in (an answer the test's bot posted) and
  `response_url` (a local recorder in place of hooks.slack.com);
- `home_click(element, view)`: the same click made in the App Home: the page lists `view` ("the view where
  the block action took place", present only then) and a container of type `view`; a view has no channel,
  message or response_url, so those go;
- `command(text, ...)`: the slash command's `/weather 94070` becomes `/mlresearch <text>`, its response_url a
  local recorder, and (for an OAuth install) its team and enterprise those of the installation.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

DATA = Path(__file__).resolve().parent / "data" / "slack"
SENT_BY_SLACK = ("envelope", "event", "payload", "form")
SHOWS = (*SENT_BY_SLACK, "response", "request")


@dataclass(frozen=True)
class Example:
    """One documented example, as the page shows it (`text`), with where it came from."""

    name: str
    source: str
    retrieved: str
    shows: str
    note: str
    text: str


def example(name: str) -> Example:
    raw = (DATA / f"{name}.txt").read_text()
    head, text = raw.split("\n---\n", 1)
    fields = dict(line.split(": ", 1) for line in head.splitlines())
    if fields["shows"] not in SHOWS:
        raise ValueError(f"{name}: unknown shows: {fields['shows']}")
    return Example(name, fields["source"], fields["retrieved"], fields["shows"], fields.get("note", ""), text)


def names() -> list[str]:
    """Every example kept in tests/data/slack/."""
    return sorted(path.stem for path in DATA.glob("*.txt"))


def loadable(text: str) -> str:
    """The example's text with the corrections listed above (the JSON ones) made."""
    text = re.sub(r"\[\s*\.\.\.\s*\]", "[]", text)
    text = re.sub(r"\{\s*\.\.\.\s*\}", "{}", text)
    text = re.sub(r"(?m)^\s*\.\.\.\s*\n", "", text)
    return re.sub(r",(\s*[}\]])", r"\1", text)


def parsed(name: str) -> Any:
    """The example as data: JSON (corrected as above), or a form's fields."""
    found = example(name)
    if found.shows == "form":
        return dict(parse_qsl("".join(found.text.split("\n")), keep_blank_values=True))
    return json.loads(loadable(found.text))


def envelope(name: str) -> dict[str, Any]:
    """An event example as Slack posts it: its own envelope, or the documented one around its event."""
    found = example(name)
    if found.shows == "envelope":
        return dict(parsed(name))
    if found.shows != "event":
        raise ValueError(f"{name} is not an event")
    body = dict(parsed("event_callback"))
    body["event"] = parsed(name)
    return body


def workspace(body: dict[str, Any]) -> str:
    """The workspace an event is for, as Slack says: the first authorization's team, else the body's."""
    authorizations = body.get("authorizations") or []
    if authorizations:
        return str(authorizations[0]["team_id"])
    return str(body["team_id"])


# --- the rewrites ----------------------------------------------------------------------------------------


def mention_for(bot_user: str) -> dict[str, Any]:
    body = envelope("app_mention")
    body["event"]["text"] = body["event"]["text"].replace("<@U0LAN0Z89>", f"<@{bot_user}>")
    return body


def shared_links(urls: list[str]) -> dict[str, Any]:
    body = envelope("link_shared")
    links = body["event"]["links"]
    for link, url in zip(links, urls, strict=False):
        link.update(domain="machinelearning.apple.com", url=url)
    return body


def left_by(user: str) -> dict[str, Any]:
    body = envelope("member_left_channel")
    body["event"]["user"] = user
    return body


def on_tab(tab: str) -> dict[str, Any]:
    body = envelope("app_home_opened")
    body["event"]["tab"] = tab
    if tab != "home":
        body["event"].pop("view", None)
    return body


def click(element: dict[str, Any], *, block_id: str = "", response_url: str | None = None,
          channel: str | None = None, message_ts: str | None = None, team: str | None = None,
          thread_ts: str | None = None, option: int = 0) -> dict[str, Any]:
    """The documented block_actions payload for a click on `element` (a Block Kit element of one of our
    messages: a button, feedback buttons, whose positive button is the one clicked, or a static select, whose
    `option`-th option is the one chosen)."""
    payload = copy.deepcopy(parsed("block_actions"))
    documented = payload["actions"][0]
    if element["type"] == "static_select":
        action = {"type": "static_select", "action_id": element["action_id"], "block_id": block_id,
                  "selected_option": element["options"][option], "placeholder": element["placeholder"],
                  "action_ts": documented["action_ts"]}
    elif element["type"] == "feedback_buttons":
        button = element["positive_button"]
        action = {"type": "feedback_buttons", "action_id": element["action_id"], "block_id": block_id,
                  "value": button["value"], "text": button["text"], "action_ts": documented["action_ts"]}
    else:
        action = {"action_id": element["action_id"], "block_id": block_id, "text": element["text"],
                  "type": element["type"], "action_ts": documented["action_ts"]}
        for name in ("value", "url"):
            if name in element:
                action[name] = element[name]
    payload["actions"] = [action]
    if response_url is not None:
        payload["response_url"] = response_url
    if channel is not None:
        payload["channel"]["id"] = channel
        payload["container"]["channel_id"] = channel
    if message_ts is not None:
        payload["container"].update(type="message", message_ts=message_ts)
        payload["message"]["ts"] = message_ts
    if thread_ts is not None:
        payload["container"]["thread_ts"] = thread_ts
    if team is not None:
        payload["team"]["id"] = team
        payload["user"]["team_id"] = team
    return payload


def home_click(element: dict[str, Any], view: dict[str, Any], *, block_id: str = "") -> dict[str, Any]:
    """The documented block_actions payload for a click on `element` in the App Home `view` (as
    views.publish answered it: with its `id`)."""
    payload = click(element, block_id=block_id)
    for name in ("channel", "message", "response_url"):
        payload.pop(name, None)
    payload["container"] = {"type": "view", "view_id": view["id"]}
    payload["view"] = view
    return payload


def command(text: str, *, response_url: str, team: str | None = None,
            enterprise: str | None = None) -> dict[str, str]:
    form = dict(parsed("slash_command"))
    form.update(command="/mlresearch", text=text, response_url=response_url)
    if team is not None:
        form["team_id"] = team
    if enterprise is not None:
        form["enterprise_id"] = enterprise
    return form
