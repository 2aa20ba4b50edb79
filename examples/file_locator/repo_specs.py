"""The five small Python repositories the file-locator tasks are asked about, as data.

Each repository has eight modules of two functions; ``make_data.py`` writes every module, its
test file, package ``__init__`` files, docs, a settings file, a README and a pyproject from these
specs. A function is ``(name, parameters, docstring, body, example call)``: the example call is
what the generated test runs. Identifiers are unique across a repository, so ``grep`` on a name
from a change request points at the file that defines it (and at its test).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fn:
    """One function of a generated module."""

    name: str
    params: str
    doc: str
    body: str
    example: str


@dataclass(frozen=True)
class Module:
    """One generated module: its path, docstring and functions."""

    path: str
    doc: str
    fns: tuple[Fn, ...]
    imports: str = ""


@dataclass(frozen=True)
class Repo:
    """One generated repository."""

    name: str
    title: str
    modules: tuple[Module, ...]
    settings: tuple[tuple[str, str], ...]
    docs: tuple[tuple[str, str], ...]


def _m(path: str, doc: str, *fns: tuple[str, str, str, str, str], imports: str = "") -> Module:
    return Module(path, doc, tuple(Fn(*f) for f in fns), imports)


BILLING = Repo("billing", "Invoices, payments and exports for a small shop.", (
    _m("billing/invoice.py", "Invoices: line items and totals.",
       ("invoice_total", "items, tax_rate=0.0", "Sum of the line items plus tax.",
        "net = sum(i['price'] * i.get('qty', 1) for i in items)\nreturn round(net * (1 + tax_rate), 2)",
        "invoice_total([{'price': 2.0, 'qty': 3}])"),
       ("add_line_item", "invoice, name, price, qty=1", "Append a line item to an invoice.",
        "invoice.setdefault('items', []).append({'name': name, 'price': price, 'qty': qty})\nreturn invoice",
        "add_line_item({}, 'pen', 1.5)")),
    _m("billing/tax.py", "Tax rates by region.",
       ("tax_rate_for", "region", "The VAT rate of a region (0 when unknown).",
        "return RATES.get(region.upper(), 0.0)", "tax_rate_for('de')"),
       ("apply_tax", "amount, rate", "The amount with tax added.",
        "return round(amount * (1 + rate), 2)", "apply_tax(100.0, 0.2)"),
       imports="RATES = {'DE': 0.19, 'FR': 0.2, 'UK': 0.2}"),
    _m("billing/discount.py", "Discounts and coupons.",
       ("apply_discount", "amount, percent", "The amount after a percentage discount.",
        "return round(amount * (1 - percent / 100), 2)", "apply_discount(50.0, 10)"),
       ("coupon_value", "code", "The percentage a coupon code is worth.",
        "return COUPONS.get(code.strip().upper(), 0)", "coupon_value('SPRING10')"),
       imports="COUPONS = {'SPRING10': 10, 'VIP20': 20}"),
    _m("billing/payment.py", "Payments against invoices.",
       ("record_payment", "invoice, amount", "Add a payment to an invoice.",
        "invoice.setdefault('payments', []).append(amount)\nreturn invoice",
        "record_payment({}, 10.0)"),
       ("is_paid", "invoice", "Whether the payments cover the invoice's total.",
        "return sum(invoice.get('payments', [])) >= invoice.get('total', 0)",
        "is_paid({'total': 5, 'payments': [5]})")),
    _m("exports/pdf_export.py", "PDF export of invoices.",
       ("render_pdf", "invoice", "The invoice as PDF bytes.",
        "lines = [f\"{i['name']}: {i['price']}\" for i in invoice.get('items', [])]\n"
        "return ('%PDF-1.4\\n' + '\\n'.join(lines)).encode()", "render_pdf({'items': []})"),
       ("pdf_filename", "invoice", "The file name of an exported invoice.",
        "return f\"invoice-{invoice.get('number', 'draft')}.pdf\"", "pdf_filename({'number': 7})")),
    _m("exports/csv_export.py", "CSV export of invoices.",
       ("export_csv", "invoices, path", "Write invoices to a CSV file.",
        "with open(path, 'w', newline='') as f:\n    w = csv.writer(f)\n    w.writerow(csv_header())\n"
        "    for inv in invoices:\n        w.writerow([inv.get('number'), inv.get('total')])\nreturn path",
        "export_csv([], '/tmp/out.csv')"),
       ("csv_header", "", "The header row of the CSV export.", "return ['number', 'total']",
        "csv_header()"),
       imports="import csv"),
    _m("customers/customer.py", "Customer records.",
       ("create_customer", "name, email", "A new customer record.",
        "return {'name': name, 'email': email.lower()}", "create_customer('Ada', 'ADA@x.org')"),
       ("customer_email", "customer", "The address invoices are sent to.",
        "return customer.get('billing_email') or customer['email']",
        "customer_email({'email': 'a@x.org'})")),
    _m("notify/reminders.py", "Payment reminders.",
       ("send_reminder", "invoice, customer", "Queue a reminder e-mail for an unpaid invoice.",
        "return {'to': customer['email'], 'subject': f\"Invoice {invoice.get('number')} is due\"}",
        "send_reminder({'number': 1}, {'email': 'a@x.org'})"),
       ("overdue_invoices", "invoices, today", "Invoices past their due date.",
        "return [i for i in invoices if i.get('due', today) < today]", "overdue_invoices([], 10)")),
), settings=(("currency", "EUR"), ("reminder_days", "14"), ("pdf_logo", "logo.png")),
   docs=(("docs/invoices.md", "Invoices"), ("docs/exports.md", "Exports")))

WEATHER = Repo("weather", "A small forecast service with weather stations and alerts.", (
    _m("weather/forecast.py", "Forecasts for a city.",
       ("daily_forecast", "city, days=3", "One forecast per day for a city.",
        "return [{'city': city, 'day': d, 'temp': 20 - d} for d in range(days)]",
        "daily_forecast('Oslo')"),
       ("hourly_forecast", "city", "Forecasts for the next 24 hours.",
        "return [{'city': city, 'hour': h} for h in range(24)]", "hourly_forecast('Oslo')")),
    _m("weather/units.py", "Unit conversions.",
       ("celsius_to_fahrenheit", "celsius", "Degrees Celsius in Fahrenheit.",
        "return celsius * 9 / 5 + 32", "celsius_to_fahrenheit(100)"),
       ("wind_speed_kmh", "meters_per_second", "Wind speed in km/h.",
        "return round(meters_per_second * 3.6, 1)", "wind_speed_kmh(10)")),
    _m("weather/alerts.py", "Severe weather alerts.",
       ("storm_alerts", "readings", "Alerts for readings with storm-force wind.",
        "return [r for r in readings if r.get('wind', 0) > 24]", "storm_alerts([{'wind': 30}])"),
       ("alert_message", "alert", "The text shown for an alert.",
        "return f\"Storm warning: wind {alert['wind']} m/s\"", "alert_message({'wind': 30})")),
    _m("stations/readings.py", "Station readings.",
       ("load_readings", "station_id", "The stored readings of a station.",
        "return list(STORE.get(station_id, []))", "load_readings('st-1')"),
       ("average_temperature", "readings", "Mean temperature of some readings.",
        "temps = [r['temp'] for r in readings]\nreturn sum(temps) / len(temps) if temps else None",
        "average_temperature([{'temp': 3}])"),
       imports="STORE: dict = {}"),
    _m("stations/registry.py", "Known weather stations.",
       ("register_station", "name, lat, lon", "Add a station to the registry.",
        "STATIONS[name] = (lat, lon)\nreturn name", "register_station('a', 1.0, 2.0)"),
       ("nearest_station", "lat, lon", "The station closest to a point.",
        "return min(STATIONS, key=lambda s: (STATIONS[s][0] - lat) ** 2 + (STATIONS[s][1] - lon) ** 2,"
        " default=None)", "nearest_station(1.0, 2.0)"),
       imports="STATIONS: dict = {}"),
    _m("api/routes.py", "HTTP routes of the forecast service.",
       ("forecast_endpoint", "request", "GET /forecast?city=...",
        "city = request.get('city', 'Oslo')\nreturn {'status': 200, 'city': city}",
        "forecast_endpoint({'city': 'Rome'})"),
       ("health_check", "", "GET /health.", "return {'status': 200, 'ok': True}", "health_check()")),
    _m("api/cache.py", "An in-memory response cache.",
       ("cache_get", "key", "A cached value, or None.", "return CACHE.get(key)", "cache_get('k')"),
       ("cache_put", "key, value, ttl=60", "Store a value for ttl seconds.",
        "CACHE[key] = value\nreturn ttl", "cache_put('k', 1)"),
       imports="CACHE: dict = {}"),
    _m("charts/plot.py", "Text charts of readings.",
       ("temperature_chart", "readings", "A bar chart of temperatures.",
        "return '\\n'.join('#' * int(r['temp']) for r in readings)",
        "temperature_chart([{'temp': 3}])"),
       ("rain_chart", "readings", "A bar chart of rainfall.",
        "return '\\n'.join('~' * int(r.get('rain', 0)) for r in readings)",
        "rain_chart([{'rain': 2}])")),
), settings=(("units", "metric"), ("cache_ttl", "60"), ("storm_wind", "24")),
   docs=(("docs/api.md", "HTTP API"), ("docs/stations.md", "Stations")))

LIBRARY = Repo("library", "Book lending for a neighbourhood library.", (
    _m("catalog/books.py", "The book catalogue.",
       ("add_book", "title, author, isbn", "Add a book to the catalogue.",
        "BOOKS[isbn] = {'title': title, 'author': author}\nreturn isbn",
        "add_book('Emma', 'Austen', '111')"),
       ("find_by_isbn", "isbn", "The book with an ISBN, or None.", "return BOOKS.get(isbn)",
        "find_by_isbn('111')"),
       imports="BOOKS: dict = {}"),
    _m("catalog/search.py", "Searching the catalogue.",
       ("search_titles", "books, query", "Books whose title contains the query.",
        "return [b for b in books if query.lower() in b['title'].lower()]",
        "search_titles([{'title': 'Emma'}], 'em')"),
       ("search_authors", "books, query", "Books whose author contains the query.",
        "return [b for b in books if query.lower() in b['author'].lower()]",
        "search_authors([{'author': 'Austen'}], 'aus')")),
    _m("loans/checkout.py", "Lending and returning books.",
       ("checkout_book", "member, book", "Lend a book to a member.",
        "return {'member': member, 'book': book, 'returned': False}", "checkout_book('m1', 'b1')"),
       ("return_book", "loan", "Mark a loan as returned.",
        "loan['returned'] = True\nreturn loan", "return_book({'returned': False})")),
    _m("loans/fines.py", "Late fees.",
       ("late_fee", "days_late", "The fee for returning a book late.",
        "return max(0, days_late) * 0.25", "late_fee(4)"),
       ("total_fines", "fees", "What a member owes in total.", "return round(sum(fees), 2)",
        "total_fines([0.5, 1.0])")),
    _m("members/accounts.py", "Member accounts.",
       ("create_member", "name, email", "A new member account.",
        "return {'name': name, 'email': email, 'active': True}", "create_member('Bo', 'bo@x.org')"),
       ("deactivate_member", "member", "Close a member's account.",
        "member['active'] = False\nreturn member", "deactivate_member({'active': True})")),
    _m("members/cards.py", "Library cards.",
       ("issue_card", "member, year", "A library card for a member.",
        "return {'member': member['name'], 'expires': year + 2}", "issue_card({'name': 'Bo'}, 2030)"),
       ("card_expiry", "card", "The year a card expires.", "return card['expires']",
        "card_expiry({'expires': 2032})")),
    _m("notify/email.py", "E-mails to members.",
       ("send_due_notice", "loan", "An e-mail reminding a member that a loan is due.",
        "return {'to': loan['member'], 'body': email_template('due')}",
        "send_due_notice({'member': 'bo@x.org'})"),
       ("email_template", "kind", "The text of an e-mail template.",
        "return TEMPLATES.get(kind, '')", "email_template('due')"),
       imports="TEMPLATES = {'due': 'Your book is due soon.'}"),
    _m("reports/stats.py", "Lending statistics.",
       ("popular_books", "loans, top=10", "The most borrowed books.",
        "counts = Counter(l['book'] for l in loans)\nreturn [b for b, _ in counts.most_common(top)]",
        "popular_books([{'book': 'b1'}])"),
       ("monthly_loans", "loans, month", "Loans made in a month.",
        "return [l for l in loans if l.get('month') == month]", "monthly_loans([], 5)"),
       imports="from collections import Counter"),
), settings=(("loan_days", "21"), ("fee_per_day", "0.25"), ("max_loans", "5")),
   docs=(("docs/loans.md", "Loans"), ("docs/members.md", "Members")))

BLOG = Repo("blog", "A small blogging platform with comments, tags and feeds.", (
    _m("blog/posts.py", "Blog posts.",
       ("create_post", "title, body, author", "A new draft post.",
        "return {'title': title, 'body': body, 'author': author, 'published': False}",
        "create_post('Hi', 'text', 'ann')"),
       ("publish_post", "post", "Make a draft post public.",
        "post['published'] = True\nreturn post", "publish_post({'published': False})")),
    _m("blog/comments.py", "Comments on posts.",
       ("add_comment", "post, text, user", "Add a comment to a post.",
        "post.setdefault('comments', []).append({'text': text, 'user': user, 'hidden': False})\n"
        "return post", "add_comment({}, 'nice', 'bo')"),
       ("hide_comment", "comment", "Hide a comment from readers.",
        "comment['hidden'] = True\nreturn comment", "hide_comment({'hidden': False})")),
    _m("blog/tags.py", "Tags on posts.",
       ("tag_post", "post, tag", "Add a tag to a post.",
        "post.setdefault('tags', set()).add(tag.lower())\nreturn post", "tag_post({}, 'News')"),
       ("posts_with_tag", "posts, tag", "The posts carrying a tag.",
        "return [p for p in posts if tag in p.get('tags', ())]", "posts_with_tag([], 'news')")),
    _m("auth/login.py", "Logging users in and out.",
       ("login_user", "username, password", "A session for valid credentials, else None.",
        "return {'user': username} if password else None", "login_user('ann', 'pw')"),
       ("logout_user", "session", "End a session.", "session.clear()\nreturn session",
        "logout_user({'user': 'ann'})")),
    _m("auth/passwords.py", "Password hashing.",
       ("hash_password", "password", "A salted hash of a password.",
        "return hashlib.sha256(('salt' + password).encode()).hexdigest()", "hash_password('pw')"),
       ("check_password", "password, hashed", "Whether a password matches its hash.",
        "return hash_password(password) == hashed", "check_password('pw', '')"),
       imports="import hashlib"),
    _m("feeds/rss.py", "The RSS feed.",
       ("build_rss_feed", "posts", "The RSS document of the published posts.",
        "items = ''.join(rss_item(p) for p in posts if p.get('published'))\n"
        "return f'<rss><channel>{items}</channel></rss>'", "build_rss_feed([])"),
       ("rss_item", "post", "One post as an RSS item.",
        "return f\"<item><title>{post['title']}</title></item>\"", "rss_item({'title': 'Hi'})")),
    _m("media/uploads.py", "Uploaded images and files.",
       ("save_upload", "name, data, folder='uploads'", "Store an uploaded file.",
        "path = f'{folder}/{name}'\nFILES[path] = data\nreturn path", "save_upload('a.png', b'')"),
       ("thumbnail_path", "path", "Where the thumbnail of an image is stored.",
        "return path.rsplit('.', 1)[0] + '_thumb.png'", "thumbnail_path('uploads/a.png')"),
       imports="FILES: dict = {}"),
    _m("search/index.py", "Full-text search over posts.",
       ("index_post", "post", "Add a post's words to the search index.",
        "for word in post['body'].lower().split():\n    INDEX.setdefault(word, set()).add(post['title'])\n"
        "return len(INDEX)", "index_post({'title': 'Hi', 'body': 'hello world'})"),
       ("search_posts", "query", "Titles of posts containing a word.",
        "return sorted(INDEX.get(query.lower(), ()))", "search_posts('hello')"),
       imports="INDEX: dict = {}"),
), settings=(("posts_per_page", "10"), ("allow_comments", "true"), ("feed_size", "20")),
   docs=(("docs/writing.md", "Writing posts"), ("docs/moderation.md", "Moderation")))

SHOP = Repo("shop", "An online shop: cart, checkout, stock and shipping.", (
    _m("shop/cart.py", "The shopping cart.",
       ("add_to_cart", "cart, sku, qty=1", "Add a product to the cart.",
        "cart[sku] = cart.get(sku, 0) + qty\nreturn cart", "add_to_cart({}, 'sku-1')"),
       ("cart_subtotal", "cart, prices", "The cart's value before shipping.",
        "return round(sum(prices[s] * q for s, q in cart.items()), 2)",
        "cart_subtotal({'a': 2}, {'a': 1.5})")),
    _m("shop/checkout.py", "Turning a cart into an order.",
       ("place_order", "cart, customer", "Create an order from a cart.",
        "return {'number': order_number(), 'items': dict(cart), 'customer': customer}",
        "place_order({}, 'c1')"),
       ("order_number", "", "A new order number.",
        "return f'ORD-{next(COUNTER):05d}'", "order_number()"),
       imports="import itertools\n\nCOUNTER = itertools.count(1)"),
    _m("shop/inventory.py", "Stock levels.",
       ("stock_level", "sku", "Units in stock for a product.", "return STOCK.get(sku, 0)",
        "stock_level('sku-1')"),
       ("reserve_stock", "sku, qty", "Hold units for an order.",
        "if STOCK.get(sku, 0) < qty:\n    raise ValueError(f'not enough {sku}')\n"
        "STOCK[sku] -= qty\nreturn STOCK[sku]", "reserve_stock('sku-1', 0)"),
       imports="STOCK: dict = {'sku-1': 3}"),
    _m("shipping/rates.py", "Shipping prices.",
       ("shipping_cost", "weight_kg, zone", "The shipping price of a parcel.",
        "return round(ZONES.get(zone, 9.0) + 0.5 * weight_kg, 2)", "shipping_cost(2.0, 'eu')"),
       ("free_shipping_threshold", "zone", "The order value above which shipping is free.",
        "return 50.0 if zone == 'eu' else 100.0", "free_shipping_threshold('eu')"),
       imports="ZONES = {'eu': 4.0, 'us': 12.0}"),
    _m("shipping/labels.py", "Parcel labels and tracking.",
       ("print_label", "order", "The text of a parcel label.",
        "return f\"Order {order['number']}\\nTo: {order['customer']}\"",
        "print_label({'number': 'ORD-1', 'customer': 'c1'})"),
       ("tracking_url", "order", "The carrier's tracking page for an order.",
        "return f\"https://track.example/{order['number']}\"", "tracking_url({'number': 'ORD-1'})")),
    _m("products/catalog.py", "The product catalogue.",
       ("product_by_sku", "sku", "The product with a SKU, or None.", "return PRODUCTS.get(sku)",
        "product_by_sku('sku-1')"),
       ("list_products", "category", "The products of a category.",
        "return [p for p in PRODUCTS.values() if p['category'] == category]",
        "list_products('toys')"),
       imports="PRODUCTS = {'sku-1': {'name': 'Kite', 'category': 'toys'}}"),
    _m("products/pricing.py", "Prices and VAT.",
       ("sale_price", "price, percent", "The price during a sale.",
        "return round(price * (1 - percent / 100), 2)", "sale_price(10.0, 20)"),
       ("price_with_vat", "price, vat=0.2", "The gross price of a product.",
        "return round(price * (1 + vat), 2)", "price_with_vat(10.0)")),
    _m("emails/receipts.py", "Order receipts.",
       ("send_receipt", "order, address", "Queue the receipt e-mail of an order.",
        "return {'to': address, 'body': receipt_text(order)}",
        "send_receipt({'number': 'ORD-1'}, 'a@x.org')"),
       ("receipt_text", "order", "The text of an order's receipt.",
        "return f\"Thank you for order {order['number']}.\"", "receipt_text({'number': 'ORD-1'})")),
), settings=(("vat", "0.2"), ("free_shipping_eu", "50"), ("carrier", "postnord")),
   docs=(("docs/orders.md", "Orders"), ("docs/shipping.md", "Shipping")))

REPOS: tuple[Repo, ...] = (BILLING, WEATHER, LIBRARY, BLOG, SHOP)
