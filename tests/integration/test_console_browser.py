"""`rivulet console` in a real headless browser (Debian's chromium and chromium-driver, driven
by Selenium): create a topic, produce to it, browse its messages, watch a group's lag fall as a
consumer catches up, and reset its offsets, dry run first. Each page's screenshot is saved
under docs/screenshots/ for the README when RIVULET_SCREENSHOTS=1, else in a temporary directory
(a run leaves the tree as it was)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.expected_conditions import staleness_of
from selenium.webdriver.support.ui import Select, WebDriverWait

pytestmark = [pytest.mark.integration, pytest.mark.browser]

T = TypeVar("T")

SHOTS = (Path(__file__).resolve().parents[2] / "docs" / "screenshots" if os.environ.get("RIVULET_SCREENSHOTS") == "1"
         else Path(tempfile.gettempdir()) / "rivulet-screenshots")
TOPIC = "orders"
PER_PARTITION = 10
PARTITIONS = 3
WAIT = 60


def _find(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail(f"none of {', '.join(names)} is installed: scripts/setup.sh test installs Debian's chromium "
                "and chromium-driver, which this test needs", pytrace=False)


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = _find("chromium", "chromium-browser")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=Service(_find("chromedriver")))
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def console(broker, tmp_path_factory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("console") / "console.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rivulet", "console", "-b", broker.bootstrap, "--port", "0"],
                                stdout=subprocess.PIPE, stderr=out, text=True)
    line = proc.stdout.readline()
    if not line.startswith("Rivulet console on "):
        proc.kill()
        pytest.fail(f"the console did not start: {line}{log.read_text()}")
    yield line.split()[3]
    proc.terminate()
    assert proc.wait(30) == 0, log.read_text()
    # A page that failed would have logged its traceback.
    assert "Traceback" not in log.read_text(), log.read_text()


def shot(driver: webdriver.Chrome, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(SHOTS / f"{name}.png"))


def text_of(driver: webdriver.Chrome, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def click_to_load(driver: webdriver.Chrome, element: WebElement) -> None:
    """Click what loads a new page, and wait until the new page has replaced the old one."""
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, WAIT).until(lambda _d: _gone(old), "the page did not load")


def _gone(old: WebElement) -> bool:
    """Whether the old page's element is gone: stale, or (mid-navigation) its document no longer
    known to Chrome's inspector, which answers that with an error of its own."""
    try:
        old.is_enabled()
    except WebDriverException:  # StaleElementReferenceException among them
        return True
    return False


def settled(driver: webdriver.Chrome, read: Callable[[webdriver.Chrome], T]) -> T:
    """``read`` of a part of the page that htmx may replace while it is read: again if it was."""
    return WebDriverWait(driver, WAIT, ignored_exceptions=[StaleElementReferenceException]).until(
        lambda d: (read(d),))[0]


def wait_for(driver: webdriver.Chrome, element_id: str, value: str) -> None:
    WebDriverWait(driver, WAIT, ignored_exceptions=[StaleElementReferenceException]).until(
        lambda d: text_of(d, element_id) == value,
        f"#{element_id} never showed {value!r}")


def lag_lines(driver: webdriver.Chrome) -> dict[str, list[str]]:
    """Each partition's line on the group's lag chart: its lag at each sample, oldest first."""
    return settled(driver, lambda d: {p.get_attribute("data-tp"): p.get_attribute("data-lags").split()
                                      for p in d.find_elements(By.CSS_SELECTOR, "#lag-chart path[data-tp]")})


def lag_legend(driver: webdriver.Chrome) -> dict[str, str]:
    """Each partition's lag now, as the chart's legend shows it."""
    return settled(driver, lambda d: {s.get_attribute("data-tp"): s.find_element(By.TAG_NAME, "b").text
                                      for s in d.find_elements(By.CSS_SELECTOR, "#lag-chart span[data-tp]")})


def test_console_end_to_end(broker, console: str, browser: webdriver.Chrome) -> None:
    d = browser
    d.get(console + "/")
    assert d.find_element(By.ID, "cluster-id").text
    brokers = d.find_elements(By.CSS_SELECTOR, "#brokers tbody tr")
    assert len(brokers) == 1 and str(broker.port) in brokers[0].text
    shot(d, "cluster")

    # Create a topic through the form.
    d.get(console + "/topics")
    form = d.find_element(By.ID, "create-topic")
    form.find_element(By.NAME, "name").send_keys(TOPIC)
    form.find_element(By.NAME, "partitions").send_keys(str(PARTITIONS))
    click_to_load(d, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
    wait_for(d, "notice", f"Created topic {TOPIC}.")
    row = d.find_element(By.CSS_SELECTOR, f'#topics tr[data-topic="{TOPIC}"]')
    assert row.find_elements(By.TAG_NAME, "td")[1].text == str(PARTITIONS)

    # Produce with a real client: JSON values, keys and a header.
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for part in range(PARTITIONS):
        for i in range(PER_PARTITION):
            p.produce(TOPIC, json.dumps({"order": i, "partition": part}).encode(), key=f"k{part}-{i}".encode(),
                      partition=part, headers=[("source", b"test")])
    assert p.flush(30) == 0
    d.refresh()
    row = d.find_element(By.CSS_SELECTOR, f'#topics tr[data-topic="{TOPIC}"]')
    assert row.find_elements(By.TAG_NAME, "td")[4].text == str(PARTITIONS * PER_PARTITION)
    assert re.fullmatch(r"[0-9.]+ (Bytes|kB)", row.find_elements(By.TAG_NAME, "td")[5].text)
    shot(d, "topics")

    # The topic's page: each partition's leader, ISR, offsets and size in bytes.
    click_to_load(d, row.find_element(By.LINK_TEXT, TOPIC))
    parts = d.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")
    assert len(parts) == PARTITIONS
    for part in parts:
        cells = part.find_elements(By.TAG_NAME, "td")
        assert cells[1].text == "1" and cells[3].text == "1"  # leader and ISR: the one broker
        assert (cells[4].text, cells[5].text, cells[6].text) == ("0", str(PER_PARTITION), str(PER_PARTITION))
        assert int(cells[7].get_attribute("data-bytes")) > 0
    # Set a config on the topic, then take it back to its default.
    form = d.find_element(By.ID, "set-config")
    form.find_element(By.NAME, "name").send_keys("retention.ms")
    form.find_element(By.NAME, "value").send_keys("3600000")
    click_to_load(d, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
    wait_for(d, "notice", "Set retention.ms.")
    cells = d.find_elements(By.CSS_SELECTOR, '#configs tr[data-config="retention.ms"] td')
    assert cells[1].text == "3600000" and cells[2].text.startswith("yes")
    shot(d, "topic")
    click_to_load(d, d.find_element(By.CSS_SELECTOR, '#configs tr[data-config="retention.ms"] button'))
    wait_for(d, "notice", "retention.ms is back to its default.")
    cells = d.find_elements(By.CSS_SELECTOR, '#configs tr[data-config="retention.ms"] td')
    assert cells[1].text == "604800000" and cells[2].text == ""

    # Browse partition 1 from offset 0 as JSON, then as hex.
    d.get(f"{console}/topics/{TOPIC}/messages")
    browse = d.find_element(By.ID, "browse")
    Select(browse.find_element(By.NAME, "partition")).select_by_value("1")
    browse.find_element(By.NAME, "offset").send_keys("0")
    Select(browse.find_element(By.NAME, "view")).select_by_visible_text("json")
    click_to_load(d, browse.find_element(By.CSS_SELECTOR, "button[type=submit]"))
    rows = d.find_elements(By.CSS_SELECTOR, "#messages tbody tr[data-offset]")
    assert [r.get_attribute("data-offset") for r in rows] == [str(i) for i in range(PER_PARTITION)]
    cells = rows[3].find_elements(By.TAG_NAME, "td")
    assert cells[2].text == "k1-3"
    assert json.loads(cells[3].text) == {"order": 3, "partition": 1}
    assert "\n" in cells[3].text  # pretty-printed
    assert cells[4].text == "source: test"
    shot(d, "messages")
    d.get(f"{console}/topics/{TOPIC}/messages?partition=1&offset=3&view=hex")
    first = d.find_element(By.CSS_SELECTOR, "#messages tbody tr[data-offset]")
    assert first.get_attribute("data-offset") == "3"
    assert first.find_elements(By.TAG_NAME, "td")[2].text == "6b312d33"  # "k1-3"
    # By time: from the first record at or after it.
    d.get(f"{console}/topics/{TOPIC}/messages?partition=1&timestamp=2000-01-01T00:00:00Z")
    assert len(d.find_elements(By.CSS_SELECTOR, "#messages tbody tr[data-offset]")) == PER_PARTITION
    d.get(f"{console}/topics/{TOPIC}/messages?partition=1&timestamp=2999-01-01T00:00:00Z")
    assert not d.find_elements(By.CSS_SELECTOR, "#messages tbody tr[data-offset]")

    # A group that read part of the topic has lag; a consumer catching up brings it to 0.
    group = "console-readers"
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    read = {part: 2 + 3 * part for part in range(PARTITIONS)}  # a different lag on each partition
    unread = sum(PER_PARTITION - n for n in read.values())
    c = Consumer(conf)  # commits as a group that has read part of every partition
    c.commit(offsets=[TopicPartition(TOPIC, part, n) for part, n in read.items()], asynchronous=False)
    c.close()
    d.get(console + "/groups")
    # Only committed offsets so far: no protocol type yet, no members.
    cells = [c.text for c in d.find_elements(By.CSS_SELECTOR, f'#groups tr[data-group="{group}"] td')]
    assert cells == [group, "-", "Empty", "0", str(unread)]
    shot(d, "groups")
    d.get(f"{console}/groups/{group}")
    wait_for(d, "group-state", "Empty")
    wait_for(d, "total-lag", str(unread))

    c = Consumer(conf)
    c.subscribe([TOPIC])
    seen: set[tuple[int, int]] = set()
    while True:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            seen.add((m.partition(), m.offset()))
            c.commit(m, asynchronous=False)
        if c.assignment() and all(c.position([tp])[0].offset >= PER_PARTITION for tp in c.assignment()) \
                and len(c.assignment()) == PARTITIONS:
            break
    wait_for(d, "total-lag", "0")  # the page reloads its lag by itself
    # Per partition: the table's lag, and a line on the chart falling from what it had unread to 0.
    names = [f"{TOPIC}-{part}" for part in range(PARTITIONS)]
    assert settled(d, lambda d: {r.get_attribute("data-tp"): r.find_element(By.CLASS_NAME, "lag").text
                                 for r in d.find_elements(By.CSS_SELECTOR, "#offsets tr[data-tp]")}) \
        == dict.fromkeys(names, "0")
    lines = lag_lines(d)
    assert sorted(lines) == names
    for part, name in enumerate(names):
        lags = lines[name]
        assert lags[0] == str(PER_PARTITION - read[part]) and lags[-1] == "0"
        assert [int(x) for x in lags] == sorted((int(x) for x in lags), reverse=True)
    assert lag_legend(d) == dict.fromkeys(names, "0")
    wait_for(d, "group-state", "Stable")
    assert settled(d, lambda d: d.find_elements(By.CSS_SELECTOR, "#members tbody tr td")[0].text) \
        != "No active members."
    shot(d, "group")
    c.close()
    wait_for(d, "group-state", "Empty")

    # Reset to the earliest offsets: the dry run changes nothing, applying it does.
    reset = d.find_element(By.ID, "reset")
    Select(reset.find_element(By.NAME, "topic")).select_by_visible_text(TOPIC)
    Select(reset.find_element(By.NAME, "strategy")).select_by_visible_text("earliest")
    click_to_load(d, d.find_element(By.ID, "dry-run"))
    wait_for(d, "plan-status", "Dry run: nothing changed.")
    plan = d.find_elements(By.CSS_SELECTOR, "#plan tbody tr")
    assert len(plan) == PARTITIONS
    assert [r.find_elements(By.TAG_NAME, "td")[2].text for r in plan] == [str(PER_PARTITION)] * PARTITIONS
    assert [r.find_element(By.CLASS_NAME, "new-offset").text for r in plan] == ["0"] * PARTITIONS
    wait_for(d, "total-lag", "0")
    click_to_load(d, d.find_element(By.ID, "apply"))
    wait_for(d, "plan-status", "Reset applied.")
    wait_for(d, "total-lag", str(PARTITIONS * PER_PARTITION))
    assert lag_legend(d) == dict.fromkeys(names, str(PER_PARTITION))
    assert all(lags[-1] == str(PER_PARTITION) for lags in lag_lines(d).values())
    shot(d, "reset")

    # Delete the topic through the page.
    d.get(console + "/topics")
    page = d.find_element(By.TAG_NAME, "html")
    d.find_element(By.CSS_SELECTOR, f'#topics tr[data-topic="{TOPIC}"] button[name=delete]').click()
    d.switch_to.alert.accept()
    WebDriverWait(d, WAIT).until(staleness_of(page), "the page did not load")
    wait_for(d, "notice", f"Deleted topic {TOPIC}.")
    assert not d.find_elements(By.CSS_SELECTOR, f'#topics tr[data-topic="{TOPIC}"]')


def create_topic(broker, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def test_live_tail_shows_new_records(broker, console: str, browser: webdriver.Chrome) -> None:
    d = browser
    create_topic(broker, "tailed", 1)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce("tailed", b"first", partition=0)
    assert p.flush(30) == 0
    d.get(f"{console}/topics/tailed/messages")
    d.find_element(By.CSS_SELECTOR, "#browse input[name=tail]").click()
    click_to_load(d, d.find_element(By.CSS_SELECTOR, "#browse button[type=submit]"))
    assert settled(d, lambda d: [r.get_attribute("data-offset")
                                 for r in d.find_elements(By.CSS_SELECTOR, "#messages tr[data-offset]")]) == ["0"]
    for i in range(3):
        p.produce("tailed", f"later {i}".encode(), partition=0)
    assert p.flush(30) == 0
    # The page fetches the tail by itself: the new records appear without a reload.
    WebDriverWait(d, WAIT, ignored_exceptions=[StaleElementReferenceException]).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#messages tr[data-offset]")) == 4,
        "the live tail never showed the new records")
    values = settled(d, lambda d: [r.find_elements(By.TAG_NAME, "td")[3].text
                                   for r in d.find_elements(By.CSS_SELECTOR, "#messages tr[data-offset]")])
    assert values == ["first", "later 0", "later 1", "later 2"]


def test_consumer_protocol_group(broker, console: str, browser: webdriver.Chrome) -> None:
    """A KIP-848 group (group.protocol=consumer): its members, assignment and lag."""
    d = browser
    create_topic(broker, "kip848", 2)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(6):
        p.produce("kip848", b"x", partition=i % 2)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "kip848-readers", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe(["kip848"])
        read = 0
        while read < 6:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                read += 1
        c.commit(asynchronous=False)
        d.get(f"{console}/groups/kip848-readers")
        wait_for(d, "group-state", "Stable")
        assert "consumer" in settled(d, lambda d: d.find_element(By.ID, "lag").text)
        assert settled(d, lambda d: d.find_element(By.CSS_SELECTOR, "#members tbody tr").find_elements(
            By.TAG_NAME, "td")[4].text) == "kip848-0, kip848-1"
        wait_for(d, "total-lag", "0")
        shot(d, "group-consumer-protocol")
    finally:
        c.close()
    # Once it is empty its offsets can be reset too: back by one on each partition.
    wait_for(d, "group-state", "Empty")
    reset = d.find_element(By.ID, "reset")
    Select(reset.find_element(By.NAME, "strategy")).select_by_visible_text("shift")
    reset.find_element(By.NAME, "value").send_keys("-1")
    click_to_load(d, d.find_element(By.ID, "apply"))
    wait_for(d, "plan-status", "Reset applied.")
    plan = d.find_elements(By.CSS_SELECTOR, "#plan tbody tr")
    assert [r.find_element(By.CLASS_NAME, "new-offset").text for r in plan] == ["2", "2"]
    wait_for(d, "total-lag", "2")


def acl_rows(driver: webdriver.Chrome) -> list[list[str]]:
    return [[c.text for c in r.find_elements(By.TAG_NAME, "td")][:7]
            for r in driver.find_elements(By.CSS_SELECTOR, "#acls tbody tr")]


def broker_acls(admin: AdminClient) -> set[tuple[str, str, str, str, str, str, str]]:
    """Every ACL the broker keeps, as the console's table shows them."""
    found = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                 AclOperation.ANY, AclPermissionType.ANY)).result(30)
    return {(b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
             b.permission_type.name) for b in found}


def test_acls_page(broker, broker_factory, console: str, browser: webdriver.Chrome, tmp_path: Path) -> None:
    d = browser
    d.get(console + "/acls")
    assert "no authorizer" in text_of(d, "acls-off")
    assert not d.find_elements(By.ID, "create-acl")
    # A form posted all the same (the page was loaded while the broker had an authorizer, say):
    # the broker's refusal is shown on the page.
    d.execute_script("""
        const f = document.createElement("form");
        f.method = "post"; f.action = "/acls";
        for (const [k, v] of Object.entries({resource_type: "TOPIC", name: "t", pattern_type: "LITERAL",
                                             principal: "User:alice", host: "*", operation: "READ",
                                             permission: "ALLOW"})) {
            const i = document.createElement("input"); i.type = "hidden"; i.name = k; i.value = v; f.appendChild(i);
        }
        document.body.appendChild(f); f.submit();""")
    wait_for(d, "error", "SECURITY_DISABLED: No Authorizer is configured on the broker")
    assert "no authorizer" in text_of(d, "acls-off")

    secured = broker_factory({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                              "allow.everyone.if.no.acl.found": "true"})
    admin = AdminClient({"bootstrap.servers": secured.bootstrap})
    binding = AclBinding(ResourceType.TOPIC, "payments", ResourcePatternType.PREFIXED, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    admin.create_acls([binding])[binding].result(30)
    payments = ["TOPIC", "payments", "PREFIXED", "User:alice", "*", "READ", "ALLOW"]
    with open(tmp_path / "console.log", "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rivulet", "console", "-b", secured.bootstrap, "--port", "0"],
                                stdout=subprocess.PIPE, stderr=out, text=True)
    try:
        url = proc.stdout.readline().split()[3]
        d.get(url + "/acls")
        assert acl_rows(d) == [payments]

        # Create one through the form.
        form = d.find_element(By.ID, "create-acl")
        Select(form.find_element(By.NAME, "permission")).select_by_visible_text("DENY")
        form.find_element(By.NAME, "principal").send_keys("User:mallory")
        host = form.find_element(By.NAME, "host")
        host.clear()
        host.send_keys("10.0.0.9")
        Select(form.find_element(By.NAME, "operation")).select_by_visible_text("WRITE")
        Select(form.find_element(By.NAME, "resource_type")).select_by_visible_text("TOPIC")
        form.find_element(By.NAME, "name").send_keys("orders")
        click_to_load(d, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
        wait_for(d, "notice", "Created ACL: DENY User:mallory from 10.0.0.9 to WRITE TOPIC orders (LITERAL).")
        mallory = ["TOPIC", "orders", "LITERAL", "User:mallory", "10.0.0.9", "WRITE", "DENY"]
        assert acl_rows(d) == [mallory, payments]  # by resource type and name
        assert broker_acls(admin) == {tuple(payments), tuple(mallory)}
        shot(d, "acls")

        # One the broker refuses: its reason is on the page, and nothing changed.
        form = d.find_element(By.ID, "create-acl")
        form.find_element(By.NAME, "principal").send_keys("alice")  # no Type: part
        Select(form.find_element(By.NAME, "operation")).select_by_visible_text("READ")
        Select(form.find_element(By.NAME, "resource_type")).select_by_visible_text("TOPIC")
        form.find_element(By.NAME, "name").send_keys("orders")
        click_to_load(d, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
        assert text_of(d, "error").startswith("INVALID_REQUEST: Could not parse principal from `alice`")
        assert acl_rows(d) == [mallory, payments]

        # Delete alice's through its button.
        old = d.find_element(By.TAG_NAME, "html")
        d.find_elements(By.CSS_SELECTOR, "#acls tbody tr")[1].find_element(By.NAME, "delete").click()
        d.switch_to.alert.accept()
        WebDriverWait(d, WAIT).until(staleness_of(old), "the page did not load")
        wait_for(d, "notice", "Deleted ACL: ALLOW User:alice from * to READ TOPIC payments (PREFIXED).")
        assert acl_rows(d) == [mallory]
        assert broker_acls(admin) == {tuple(mallory)}
    finally:
        proc.terminate()
        proc.wait(30)
    assert "Traceback" not in (tmp_path / "console.log").read_text()
