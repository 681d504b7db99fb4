"""What every command needs: settings, the queue, the clock. Built on first use."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sheetq.clock import Clock, clock_from_env

if TYPE_CHECKING:
    from sheetq.config import Settings
    from sheetq.port import QueuePort


@dataclass
class Context:
    spreadsheet: str | None = None
    database_url: str | None = None
    config: str | None = None
    verbose: int = 0
    quiet: bool = False
    _settings: Settings | None = None
    _clock: Clock | None = None
    queues: list[QueuePort] = field(default_factory=list)  # opened: closed at exit

    def settings(self, *, require_spreadsheet: bool = True) -> Settings:
        if self._settings is None or (
            require_spreadsheet
            and not self._settings.spreadsheet
            and not self._settings.database_url
        ):
            from sheetq.config import load_settings

            self._settings = load_settings(
                spreadsheet=self.spreadsheet,
                config=self.config,
                database_url=self.database_url,
                require_spreadsheet=require_spreadsheet,
            )
        return self._settings

    def queue(
        self, *, create: bool = False, time_limit: float | None = None, time_limit_name: str = ""
    ) -> QueuePort:
        """The queue these settings name (``sheetq.backends.open_queue``), closed at exit;
        nothing is opened until a method needs it (``create``, ``time_limit``: see there)."""
        from sheetq.backends import open_queue

        queue = open_queue(
            self.settings(), create=create, time_limit=time_limit, time_limit_name=time_limit_name
        )
        self.queues.append(queue)
        return queue

    def keep(self, queue: QueuePort) -> QueuePort:
        """Close ``queue`` at exit too (a command's second queue: ``migrate``'s source)."""
        self.queues.append(queue)
        return queue

    def clock(self) -> Clock:
        if self._clock is None:
            self._clock = clock_from_env()
        return self._clock

    def rng(self) -> random.Random:
        seed = os.environ.get("SHEETQ_SEED")
        return random.Random(int(seed)) if seed and seed.isdigit() else random.Random()

    def close(self) -> None:
        for queue in self.queues:
            queue.close()
        self.queues.clear()
