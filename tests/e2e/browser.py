"""Headless Chromium (Debian's `chromium` + `chromium-driver`) driven by
Selenium, for the dashboard's browser tests and its screenshots: nothing is
downloaded (both paths are given), a fresh profile each time, and no
background traffic of Chromium's own, so the network log holds only what
the pages asked for."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def available() -> str | None:
    """None when the browser can run here, else why not."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the dev extra)"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).exists():
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    return None


class Browser:
    """One Chromium for a test module: `driver`, and the requests and console
    messages seen since the last `drain()`."""

    def __init__(self, width: int = 1280, height: int = 900):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        self.profile = tempfile.mkdtemp(prefix="brigade-chromium-")
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update",
                    "--no-first-run", "--disable-sync", "--disable-default-apps",
                    "--disable-extensions", "--no-default-browser-check",
                    "--disable-features=Translate,OptimizationHints,MediaRouter",
                    f"--user-data-dir={self.profile}", f"--window-size={width},{height}"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
        self.driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
        self.driver.set_page_load_timeout(30)

    def drain(self) -> tuple[list[str], list[dict]]:
        """(URLs requested, console entries) since the last call."""
        urls = []
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                urls.append(message["params"]["request"]["url"])
        return urls, self.driver.get_log("browser")

    @staticmethod
    def foreign(urls: list[str], server: str) -> list[str]:
        """The requests that went anywhere but `server` (data: and blob: are local)."""
        host = urlsplit(server).netloc
        return [u for u in urls if urlsplit(u).scheme not in ("data", "blob", "about")
                and urlsplit(u).netloc != host]

    def resize(self, width: int, height: int) -> None:
        self.driver.set_window_size(width, height)

    def screenshot(self, path: Path, full_page: bool = True) -> None:
        """The page at the window's width; `full_page`: as tall as its content."""
        if full_page:
            height = self.driver.execute_script(
                "return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
            size = self.driver.get_window_size()
            self.driver.set_window_size(size["width"], min(max(int(height) + 140, 600), 4000))
        path.parent.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(path))

    def close(self) -> None:
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)
