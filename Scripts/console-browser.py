#!/usr/bin/env python3
"""Drives the store's admin console in headless Chromium (Selenium + chromedriver), as an operator would.

Usage: console-browser.py URL CREDENTIAL SCREENSHOT_DIR
The store behind URL must hold: one pending refund request, a failed webhook delivery, purchases in USD
(ConsoleBrowserTests prepares them). Each step prints what it checked; any failure exits 1 with the reason.
Screenshots of each page go to SCREENSHOT_DIR (docs/console/ holds the committed ones).
"""
import os
import sys

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

url, credential, shots = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
os.makedirs(shots, exist_ok=True)


def check(condition, what):
    if not condition:
        print(f"console-browser: FAILED: {what}", flush=True)
        driver.save_screenshot(os.path.join(shots, "failure.png"))
        sys.exit(1)
    print(f"console-browser: ok: {what}", flush=True)


def shot(name):
    driver.save_screenshot(os.path.join(shots, f"{name}.png"))


def flash():
    found = driver.find_elements(By.ID, "flash")
    return found[0].text if found else ""


def submit(form_action, fields=None, index=0):
    """Fills the text inputs of the index-th form posting to form_action and presses its button."""
    forms = [f for f in driver.find_elements(By.TAG_NAME, "form") if f.get_attribute("action").endswith(form_action)]
    check(len(forms) > index, f"a form posting to {form_action}")
    form = forms[index]
    for name, value in (fields or {}).items():
        box = form.find_element(By.NAME, name)
        box.clear()
        box.send_keys(value)
    page = driver.find_element(By.TAG_NAME, "html")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # The answer is a new page: wait until the old one is gone before reading it. Chromium may report the old
    # page's node as "not in the document" (a WebDriverException) rather than stale while it swaps them: gone too.
    def gone(_):
        try:
            return expected_conditions.staleness_of(page)(driver)
        except WebDriverException:
            return True

    WebDriverWait(driver, 10).until(gone)


options = Options()
for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1200,900"]:
    options.add_argument(argument)
options.binary_location = "/usr/bin/chromium"
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
driver.set_page_load_timeout(20)
try:
    driver.get(url + "/")
    check(driver.current_url.endswith("/signin"), "without a session, / sends to the sign-in page")
    shot("signin")
    driver.find_element(By.ID, "credential").send_keys("ksvc_" + "0" * 64)
    submit("/signin")
    check("not an admin credential" in driver.page_source, "a wrong credential is refused with a reason")
    driver.find_element(By.ID, "credential").send_keys(credential)
    submit("/signin")
    check(driver.find_element(By.TAG_NAME, "h1").text == "Overview", "the admin credential signs in to the overview")
    cookie = driver.get_cookie("kiosk_console")
    check(cookie is not None and cookie["httpOnly"] and cookie.get("sameSite") == "Strict",
          "the session cookie is HttpOnly and SameSite=Strict")
    check(driver.execute_script("return document.cookie").find("kiosk_console=") < 0,
          "page scripts cannot read the session cookie")
    charts = driver.find_elements(By.CSS_SELECTOR, "svg.chart")
    check(len(charts) >= 3,
          f"the overview draws its charts ({len(charts)} SVGs: revenue per currency, purchases and refunds, subscriptions)")
    check("Revenue per day in USD" in driver.page_source, "the revenue chart is there, in USD")
    check(len(driver.find_elements(By.CSS_SELECTOR, "svg.chart rect")) > 5, "the charts have bars")
    shot("overview")

    driver.get(url + "/products")
    check("pro.monthly" in driver.page_source and "filter.sepia" in driver.page_source, "products lists the catalog")
    shot("products")

    driver.get(url + "/refunds")
    rows = driver.find_elements(By.CSS_SELECTOR, "tbody tr")
    check(len(rows) >= 1, "refund requests lists the pending request")
    transaction = rows[0].find_element(By.TAG_NAME, "a").text
    shot("refunds")
    submit("/refunds/grant", {"reason": "granted from the browser test"})
    check(flash() == f"Refunded {transaction}.", f"granting refunds {transaction}")

    driver.get(url + "/accounts")
    box = driver.find_element(By.NAME, "q")
    box.send_keys(transaction)
    submit("/accounts")
    check("granted from the browser test" in driver.page_source, "the account search by transaction id shows the refund")
    shot("account")

    driver.get(url + "/webhooks?state=failed")
    check("failed" in driver.page_source, "webhooks shows the failed delivery")
    shot("webhooks")
    submit("/webhooks/redrive", index=1)
    check(flash().startswith("Queued 1 failed delivery again"), "redrive queues the failed delivery")

    driver.get(url + "/keys")
    keys_before = len(driver.find_elements(By.CSS_SELECTOR, "table")[0].find_elements(By.CSS_SELECTOR, "tbody tr"))
    submit("/keys/rotate")
    check(flash().startswith("Rotated: "), "rotate adds a signing key")
    keys_after = len(driver.find_elements(By.CSS_SELECTOR, "table")[0].find_elements(By.CSS_SELECTOR, "tbody tr"))
    check(keys_after == keys_before + 1, "the key list has the new key")
    submit("/credentials/create", {"name": "cdn-browser"})
    check(driver.find_element(By.ID, "secret").text.startswith("ksvc_"), "a new credential's secret is shown once")
    shot("keys")
    driver.get(url + "/keys")
    check("ksvc_" not in driver.page_source, "the secret is not shown again")
    revoke = [f for f in driver.find_elements(By.TAG_NAME, "form") if f.get_attribute("action").endswith("/credentials/revoke")]
    submit("/credentials/revoke", index=len(revoke) - 1)
    check(flash().startswith("Revoked svc_"), "revoke revokes the newest credential")

    # A forged form: the CSRF token changed in the page; the console refuses it and does nothing.
    driver.execute_script(
        "document.querySelector('form[action=\"/keys/rotate\"] input[name=csrf]').value = 'forged'")
    submit("/keys/rotate")
    check("Refused" in driver.find_element(By.TAG_NAME, "h1").text, "a form with a forged CSRF token is refused")
    driver.get(url + "/keys")
    still = len(driver.find_elements(By.CSS_SELECTOR, "table")[0].find_elements(By.CSS_SELECTOR, "tbody tr"))
    check(still == keys_after, "and no key was added")

    driver.get(url + "/activity")
    source = driver.page_source
    check(source.count("console svc_") >= 5 and "REFUNDED" in source and "OPERATOR_ACTION" in source,
          "activity lists each action with the operator who did it")
    shot("activity")

    submit("/signout")
    check(driver.current_url.endswith("/signin"), "sign-out returns to the sign-in page")
    driver.get(url + "/keys")
    check(driver.current_url.endswith("/signin"), "after sign-out the pages need a new sign-in")
    print("console-browser: all checks passed", flush=True)
finally:
    driver.quit()
