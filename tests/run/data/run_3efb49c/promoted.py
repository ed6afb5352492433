# speed=1.3
# tag=t2
def gdn_prefill(**kw):
    return None
