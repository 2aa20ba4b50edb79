"""HTTP routes of the forecast service."""


def forecast_endpoint(request):
    """GET /forecast?city=..."""
    city = request.get('city', 'Oslo')
    return {'status': 200, 'city': city}


def health_check():
    """GET /health."""
    return {'status': 200, 'ok': True}
