# speed=1.0
# tag=baseline
def gdn_prefill(**kw):
    return None
