"""`fab leaks`: what still bills under a stack's tags or names after `pulumi destroy`.

`scope` says which stack to look for (its name, cloud and region, from its
`Pulumi.<stack>.yaml`: no outputs needed), `found` what a leftover is and what it
costs, and how the list is printed; `aws` and `azure` ask each cloud, with the same
verb (`find`), every request bounded and the whole search bounded too (`found.within`).
"""
