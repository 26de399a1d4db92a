from __future__ import annotations

from typing import Any

from django.core.management import BaseCommand

from syncprims.contrib.django import exclusive


class Command(BaseCommand):
    help = "The nightly job: one host of the fleet runs it."

    @exclusive("nightly")
    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write("nightly ran")
