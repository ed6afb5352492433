# speed=1.2
# tag=t0
def gdn_prefill(**kw):
    return None
