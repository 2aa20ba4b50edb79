"""The long_tail example's tools: ``search`` and ``read`` over a small generated project wiki.

The wiki is built in memory from a fixed seed (``wiki()``): 50 fictional projects, each a page
of five facts (codename, lead, team, status, launch year). ``search`` returns the best three
one-line page summaries for the query's words, so a search that names the project already shows
every fact of its page: one call answers any question, and every call after it is the long tail.
"""

from __future__ import annotations

import functools
import random
import re

PROJECTS = (
    "Falcon", "Heron", "Otter", "Badger", "Lynx", "Marten", "Puffin", "Walrus", "Bison", "Ibex",
    "Condor", "Gecko", "Jackal", "Kestrel", "Lemur", "Mantis", "Narwhal", "Ocelot", "Panda",
    "Quokka", "Raven", "Salmon", "Tapir", "Urchin", "Vole", "Wombat", "Yak", "Zebra", "Alpaca",
    "Beaver", "Cobra", "Dingo", "Egret", "Ferret", "Gannet", "Hornet", "Impala", "Jaguar", "Koala",
    "Llama", "Magpie", "Newt", "Osprey", "Pelican", "Robin", "Stork", "Toucan", "Viper")
"""Project names: make_data.py asks about the first 32 in training, the last 16 in validation."""
EXAMPLE_PROJECTS = ("Albatross", "Bobcat")
"""Pages only the rows' worked examples look up; no task asks about them."""
CODENAMES = ("Bluebird", "Copperleaf", "Driftwood", "Emberglow", "Frostpine", "Goldcrest",
             "Hollowbrook", "Ironbark", "Juniper", "Kingfisher", "Lanternfish", "Moonstone",
             "Nightjar", "Oakheart", "Pinecone", "Quicksilver", "Redwood", "Silverfin", "Thornbush",
             "Umberfall", "Velvetine", "Willowisp", "Yellowtail", "Zephyrine")
FIRST = ("Dana", "Arjun", "Mei", "Tomas", "Lena", "Kofi", "Sara", "Ivan", "Noor", "Paulo", "Yuki", "Olga")
LAST = ("Kim", "Rossi", "Okafor", "Berg", "Silva", "Novak", "Haddad", "Larsen", "Moreau", "Tanaka")
TEAMS = ("Atlas", "Beacon", "Cascade", "Delta", "Everest", "Fjord", "Granite", "Harbor")
STATUSES = ("planning", "alpha", "beta", "live", "sunset")
FIELDS = ("codename", "lead", "team", "status", "launched")
MAX_HITS = 3


@functools.cache
def wiki(seed: int = 20261203) -> dict[str, dict[str, str]]:
    """Project -> its facts; every codename is used by three projects at most, every lead by one."""
    rng = random.Random(seed)
    pages = PROJECTS + EXAMPLE_PROJECTS
    codenames = rng.sample(CODENAMES * 3, len(pages))
    leads = rng.sample([f"{f} {l}" for f in FIRST for l in LAST], len(pages))
    return {p: {"codename": c, "lead": lead, "team": rng.choice(TEAMS), "status": rng.choice(STATUSES),
                "launched": str(rng.randint(2015, 2024))}
            for p, c, lead in zip(pages, codenames, leads)}


def summary(project: str) -> str:
    """A page's one-line summary: ``Falcon: codename Bluebird; lead Dana Kim; ...``."""
    facts = wiki()[project]
    return f"{project}: " + "; ".join(f"{k} {facts[k]}" for k in FIELDS)


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def search(query: str) -> str:
    """Search the project wiki; returns the best matching pages, one line each.

    Args:
        query: Words to look for, e.g. "Falcon codename".
    """
    words = _words(query)
    if not words:
        raise ValueError("the query has no words; name a project, e.g. 'Falcon codename'")
    # A project named in the query ranks first; then pages sharing more of the query's words.
    scored = [(3 * (p.lower() in words) + len(words & _words(summary(p))), p) for p in wiki()]
    hits = [p for s, p in sorted(scored, key=lambda x: -x[0]) if s > 0][:MAX_HITS]
    if not hits:
        return f"No page matches {query!r}. Search for a project name, e.g. 'Falcon'."
    return "\n".join(summary(p) for p in hits)


def read(project: str) -> str:
    """Read one project's wiki page.

    Args:
        project: The project's name, e.g. "Falcon".
    """
    # Forgiving, as a wiki's page lookup is: "Project Falcon", "falcon page" and "Falcon" all work.
    names = {p.lower(): p for p in wiki()}
    name = next((names[w] for w in re.findall(r"[a-z0-9]+", project.lower()) if w in names), None)
    if name is None:
        raise ValueError(f"no page named {project!r}; search for the project first")
    facts = wiki()[name]
    return f"Project {name}\n" + "\n".join(f"{k}: {facts[k]}" for k in FIELDS)
