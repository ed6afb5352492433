# speed=0.9
# tag=t1
def gdn_prefill(**kw):
    return None
