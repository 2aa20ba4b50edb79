"""``ArftError``: the one base of every error a user should see as a message, not a traceback.

The rule, for every module of arft:

- **Raise an ``ArftError`` subclass when the user can fix it**: a job, dataset, grader or tool
  spec that cannot be used, a bad command-line argument, a service that cannot be reached (a
  tool endpoint, an MCP server, a vLLM server, a Ray cluster), a model whose weights are not
  here, a run directory that is not one. The message names what is wrong and says what to do
  (the file, line and field; the command or setting that fixes it).
- **Raise a plain exception (or ``assert``) when arft broke its own rule**: an argument no caller
  should pass, a state that cannot happen. Those keep their traceback all the way up, because
  the traceback is what whoever fixes arft needs.

The commands (``arft.cli``) catch ``ArftError`` alone: they print ``error: <message>`` (and the
error's ``hint`` when it has one) and exit with code 2; anything else propagates with its
traceback. The server (``arft serve``) answers its own ``ChatRequestError`` with a 4xx.

Some subclasses also derive from ``ValueError`` (or ``OSError``); each says why beside its
``class`` line (code that catches ``ValueError``, or a constructor that needs ``OSError``'s).
"""

from __future__ import annotations


class ArftError(Exception):
    """An error the user can fix; ``str()`` is the message a command prints after ``error:``.

    ``hint``: one line saying what to do next, for a whole class of errors whose messages cannot
    say it themselves; the commands print it under the message. ``None``: the message says it.
    """

    hint: str | None = None
