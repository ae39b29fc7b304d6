"""The audit console in headless chromium: what an auditor does, with the keyboard and the mouse."""

import os
import time

import pytest
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from conftest import HOSTILE, PROJECT, ledger


def sign_in(browser, base, key):
    browser.get(f"{base}/console/sign-in")
    field = browser.find_element(By.ID, "key")
    field.send_keys(key)
    field.send_keys(Keys.ENTER)
    loaded(browser, field)


def loaded(browser, old):
    """Waits until the page `old` belonged to has been replaced."""
    WebDriverWait(browser, 10).until(lambda _: replaced(old))


def replaced(old):
    """True once `old` no longer belongs to the current document.

    Selenium's `staleness_of` knows only the stale-element error. While a navigation is under way,
    chromedriver can instead answer "unknown error: ... Node with given id does not belong to the
    document" (seen in CI) — the same fact, reported mid-swap; any other error is still raised.
    """
    try:
        old.is_enabled()
        return False
    except StaleElementReferenceException:
        return True
    except WebDriverException as error:
        if "does not belong to the document" in (error.msg or ""):
            return True
        raise


def test_auditor_and_admin_sign_in_device_and_wrong_keys_do_not(scenario, browser):
    base = scenario["base"]
    for key in ("dev-client-key", "wrong-key"):
        sign_in(browser, base, key)
        assert browser.current_url.endswith("/console/sign-in")
        assert "That key does not open the audit console." in browser.find_element(By.CSS_SELECTOR, ".error").text
        assert key not in browser.page_source
    # The refusals answer 401, which the browser reports as failed loads: expected here, and drained.
    refused = browser.get_log("browser")
    assert all("401" in entry["message"] for entry in refused if entry["level"] == "SEVERE"), refused
    sign_in(browser, base, "owner")
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Project {PROJECT}"
    button = browser.find_element(By.CSS_SELECTOR, "form[action='/console/sign-out'] button")
    button.click()
    loaded(browser, button)
    assert browser.current_url.endswith("/console/sign-in")
    sign_in(browser, base, "auditor")
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Project {PROJECT}"
    assert "auditor" in browser.find_element(By.CSS_SELECTOR, ".who").text
    cookie = browser.get_cookie("tl_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert "auditor" not in browser.current_url and "auditor" not in cookie["value"]


def test_condition_message_shows_the_recipients_of_its_send_time(scenario, browser):
    base = scenario["base"]
    sign_in(browser, base, "auditor")
    browser.get(f"{base}/console/messages")
    link = browser.find_element(By.LINK_TEXT, scenario["condition"])
    link.click()
    loaded(browser, link)
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Message {scenario['condition']}"
    assert "Matches" in browser.find_element(By.CSS_SELECTOR, ".badge.ok").text
    shown = {cell.text for cell in browser.find_elements(By.CSS_SELECTOR, "tbody td:first-child code")}
    # At send time: alice (A, B) and carol (A, C). Not bob, who joined B later; carol left A later.
    assert shown == {scenario["alice"], scenario["carol"]}
    acknowledged = browser.find_elements(By.CSS_SELECTOR, "tbody .ack")
    assert len(acknowledged) == 1
    assert "1 of 2" in browser.page_source


def test_csv_download_equals_ledger_replay(scenario, browser):
    base = scenario["base"]
    sign_in(browser, base, "auditor")
    browser.get(f"{base}/console/messages/{scenario['condition']}")
    browser.find_element(By.PARTIAL_LINK_TEXT, "Download the recipients").click()
    path = os.path.join(browser.downloads, f"message-{scenario['condition']}-recipients.csv")
    deadline = time.time() + 10

    def finished():
        # Chromium may show the file before it has written it (CI read it empty once): done when it is there, not
        # empty (the CSV has at least its header) and no partial download is left.
        return (os.path.exists(path) and os.path.getsize(path) > 0
                and not any(name.endswith(".crdownload") for name in os.listdir(browser.downloads)))
    while not finished() and time.time() < deadline:
        time.sleep(0.1)
    with open(path) as downloaded:
        csv = downloaded.read()
    replay = ledger(scenario, "replay", "--message", scenario["condition"], "--format", "csv")
    assert replay.returncode == 0, replay.stderr
    assert csv == replay.stdout
    assert csv.splitlines()[0] == "token,device" and len(csv.splitlines()) == 3


def test_a_devices_topics_at_a_past_time(scenario, browser):
    base = scenario["base"]
    sign_in(browser, base, "auditor")
    browser.get(f"{base}/console/devices")
    browser.find_element(By.NAME, "token").send_keys(scenario["carol"])
    field = browser.find_element(By.NAME, "at")
    field.send_keys(scenario["at_send"], Keys.ENTER)
    loaded(browser, field)
    facts = browser.find_element(By.CSS_SELECTOR, ".facts").text
    assert "TopicA" in facts and "TopicC" in facts
    field = browser.find_element(By.NAME, "at")
    field.clear()
    field.send_keys(Keys.ENTER)
    loaded(browser, field)
    facts = browser.find_element(By.CSS_SELECTOR, ".facts").text
    topics_now = facts.split("Topics at")[1].split("\n")[1]
    assert "TopicC" in topics_now and "TopicA" not in topics_now
    assert "still subscribed" in browser.page_source


def test_a_topics_chart(scenario, browser):
    base = scenario["base"]
    sign_in(browser, base, "auditor")
    browser.get(f"{base}/console/topics?order=subscribers")
    link = browser.find_element(By.LINK_TEXT, "weather")
    link.click()
    loaded(browser, link)
    chart = browser.find_element(By.CSS_SELECTOR, "svg.chart")
    assert chart.is_displayed() and chart.size["width"] > 300
    points = chart.find_element(By.TAG_NAME, "polyline").get_attribute("points").split()
    assert len(points) >= 3
    assert "4 members" in browser.page_source


def test_a_hostile_app_id_is_shown_as_text(scenario, browser):
    base = scenario["base"]
    sign_in(browser, base, "auditor")
    browser.get(f"{base}/console/devices?token={scenario['mallory']}")
    assert HOSTILE in browser.find_element(By.CSS_SELECTOR, ".facts").text
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    browser.get(f"{base}/console/messages/{scenario['weather']}")
    assert HOSTILE in browser.find_element(By.CSS_SELECTOR, "pre.json").text
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text


def test_the_log_shows_hashes(scenario, browser):
    base = scenario["base"]
    sign_in(browser, base, "auditor")
    browser.get(f"{base}/console/log?kind=sent")
    rows = browser.find_elements(By.CSS_SELECTOR, "table.log tbody tr")
    assert len(rows) == 2
    for row in rows:
        hashes = row.find_elements(By.CSS_SELECTOR, "td:last-child code")
        assert len(hashes) == 2 and all(len(code.text) == 64 for code in hashes)


@pytest.mark.parametrize("name", ["Overview", "Messages", "Devices", "Topics", "Log"])
def test_every_page_by_keyboard_alone(scenario, browser, name):
    base = scenario["base"]
    browser.get(f"{base}/console/sign-in")
    page = browser.find_element(By.TAG_NAME, "html")
    ActionChains(browser).send_keys("auditor", Keys.ENTER).perform()  # the key field has autofocus
    loaded(browser, page)
    assert browser.find_element(By.TAG_NAME, "h1").text == f"Project {PROJECT}"
    for _ in range(40):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        if browser.switch_to.active_element.text == name:
            break
    assert browser.switch_to.active_element.text == name
    page = browser.find_element(By.TAG_NAME, "html")
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    if name != "Overview":
        loaded(browser, page)
    title = {"Log": "The log"}.get(name, name)
    assert browser.title.startswith(title)
