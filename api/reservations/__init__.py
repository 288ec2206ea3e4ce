"""Reservations: prepaid capacity pools that admins register and the scheduler fills first."""
