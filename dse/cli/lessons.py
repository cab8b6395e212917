"""`dse lesson TEXT --from EXP ...` and `dse lessons`: lessons and reusable methods linked
to the experiments they came from (`dse.records.lessons`)."""

from __future__ import annotations

import os

from ..errors import InputError
from ..records import light
from .common import _user, _when, add_db_argument, default_db, open_store


def _author(args) -> str:
    if args.author is not None:
        return args.author
    return os.environ.get("DSE_AUTHOR") or _user()


def lesson_lines(found: list[dict]) -> list[str]:
    """One line per lesson, as `dse lessons` and `dse show EXP` print them."""
    from ..records.lessons import sources_text

    return [f"lesson {x['id']} ({_when(x['created_at'])}, {x['author']}; {sources_text(x)}): {x['text']}"
            for x in found]


def cmd_lesson(args) -> int:
    if args.list:
        if args.text is not None or args.sources:
            raise InputError("dse lesson", "--list", args.text or args.sources, "--list alone (no TEXT, no --from)")
        return _list(args.db)
    if args.text is None:
        raise InputError("dse lesson", "TEXT", None, "the lesson or method to record (or --list)")
    author = _author(args)
    with open_store(args.db) as store:
        ident = store.add_lesson(args.text, args.sources or [], author)
        lesson = next(x for x in store.lessons() if x["id"] == ident)
    from ..records.lessons import sources_text

    print(f"lesson {ident} recorded by {author}, {sources_text(lesson)}")
    return 0


def cmd_lessons(args) -> int:
    return _list(args.db)


def _list(db) -> int:
    from ..records.lessons import lessons

    with light.open_light(db or default_db()) or open_store(db) as store:
        found = lessons(store.notes())
    if not found:
        print("no lessons yet (dse lesson TEXT --from EXPERIMENT)")
        return 0
    print("\n".join(lesson_lines(found)))
    return 0


def register(sub) -> None:
    lesson = sub.add_parser("lesson", help="record a lesson or reusable method, linked to the experiments it came from")
    lesson.add_argument("text", nargs="?", metavar="TEXT", help="the lesson or method")
    lesson.add_argument("--from", dest="sources", action="append", metavar="EXPERIMENT",
                        help="an experiment (name or id) it came from; repeat for each")
    lesson.add_argument("--list", action="store_true", help="list every lesson (as `dse lessons`)")
    lesson.add_argument("--author", help="who writes it (default $DSE_AUTHOR, else the login name)")
    add_db_argument(lesson)
    lesson.set_defaults(func=cmd_lesson)
    lst = sub.add_parser("lessons", help="every lesson and method, with the experiments it came from")
    add_db_argument(lst)
    lst.set_defaults(func=cmd_lessons)
