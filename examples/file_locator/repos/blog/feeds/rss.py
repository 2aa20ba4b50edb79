"""The RSS feed."""


def build_rss_feed(posts):
    """The RSS document of the published posts."""
    items = ''.join(rss_item(p) for p in posts if p.get('published'))
    return f'<rss><channel>{items}</channel></rss>'


def rss_item(post):
    """One post as an RSS item."""
    return f"<item><title>{post['title']}</title></item>"
