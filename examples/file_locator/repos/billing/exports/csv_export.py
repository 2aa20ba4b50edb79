"""CSV export of invoices."""

import csv


def export_csv(invoices, path):
    """Write invoices to a CSV file."""
    with open(path, 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(csv_header())
        for inv in invoices:
            w.writerow([inv.get('number'), inv.get('total')])
    return path


def csv_header():
    """The header row of the CSV export."""
    return ['number', 'total']
