"""A real browser for the admin's pages: Debian's Chromium, headless, driven by Selenium.
`chromium()` gives one at a desktop size or as a 390 px phone; `log_in()` signs a person in.
Skips the test when Chromium or its driver is not installed (.ci/run installs them)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

SCREENSHOTS = Path(__file__).resolve().parents[1] / "var" / "screenshots"
PHONE = {"width": 390, "height": 844, "pixelRatio": 3.0}
PASSWORD = "correct horse"


@contextmanager
def chromium(*, phone: bool = False) -> Iterator[webdriver.Chrome]:
    binary, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if binary is None or driver_path is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed (.ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for argument in ("--headless=new", "--no-sandbox", "--window-size=1280,1800"):
        options.add_argument(argument)
    if phone:
        options.add_experimental_option("mobileEmulation", {"deviceMetrics": PHONE})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()


def log_in(browser: webdriver.Chrome, base_url: str, username: str) -> None:
    """Sign in through the admin's login form, as a person does."""
    browser.get(f"{base_url}/admin/login/")
    browser.find_element(By.NAME, "username").send_keys(username)
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    WebDriverWait(browser, 30).until(lambda d: d.title.startswith("Site administration"))


def fits_the_screen(browser: webdriver.Chrome) -> bool:
    """The page needs no scrolling sideways: nothing is wider than the viewport."""
    widths = browser.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth];"
    )
    return bool(widths[0] <= widths[1])


def screenshot(browser: webdriver.Chrome, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    browser.save_screenshot(str(path))
    return path
