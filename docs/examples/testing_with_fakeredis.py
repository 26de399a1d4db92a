"""Unit-testing code that takes locks: pass a fakeredis client, no server needed."""

import fakeredis

import syncprims


def pay_invoice(locks: syncprims.Client, invoice: str, ledger: list[str]) -> bool:
    """The application code under test: at most one payer per invoice."""
    lock = locks.get_lock(f"invoice:{invoice}")
    if not lock.try_lock(wait_time=0.1, lease_time=10):
        return False
    try:
        ledger.append(invoice)
        return True
    finally:
        lock.unlock()


def test_pay_invoice_holds_the_invoice_lock() -> None:
    r = fakeredis.FakeRedis()
    with syncprims.connect(r) as locks:
        ledger: list[str] = []
        assert pay_invoice(locks, "42", ledger)
        # Someone else holds the invoice: the payment is refused, nothing is written.
        other = syncprims.connect(r)
        assert other.get_lock("invoice:42").try_lock(lease_time=10)
        assert not pay_invoice(locks, "42", ledger)
        other.get_lock("invoice:42").force_unlock()
        other.shutdown()
        assert ledger == ["42"]


if __name__ == "__main__":
    test_pay_invoice_holds_the_invoice_lock()
    print("ok")
