"""The spot policy benchmark: simulator (the exact rules), baseline and omniscient policies, the
adapter that runs our shipped `decide()`, and the experiment over the traces."""
