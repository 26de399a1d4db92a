from __future__ import annotations

from typing import Any

from django.core.management import BaseCommand, CommandParser

from syncprims.contrib.django import get_client


class Command(BaseCommand):
    help = "A long-running job: the fleet's leader runs it; the others stand by."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--wait", type=float, default=None, help="seconds to stand by")
        parser.add_argument("--rounds", type=int, default=3)

    def handle(self, *args: Any, **options: Any) -> None:
        election = get_client().get_leader_election("scheduler", value="this host")
        if not election.campaign(wait_time=options["wait"]):
            self.stdout.write("not the leader: standing down")
            return
        try:
            for _ in range(options["rounds"]):
                if not election.is_leader():
                    break
                self.stdout.write(f"round as leader, term {election.term}")
        finally:
            election.resign()
