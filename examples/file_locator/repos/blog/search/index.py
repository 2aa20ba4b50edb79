"""Full-text search over posts."""

INDEX: dict = {}


def index_post(post):
    """Add a post's words to the search index."""
    for word in post['body'].lower().split():
        INDEX.setdefault(word, set()).add(post['title'])
    return len(INDEX)


def search_posts(query):
    """Titles of posts containing a word."""
    return sorted(INDEX.get(query.lower(), ()))
