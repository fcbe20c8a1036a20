"""SASL on the server side (KIP-43, KIP-152): the JAAS line, the mechanisms, a listener's setup.

Each mechanism is a state machine with no I/O (`SaslServer`): `evaluate(token) -> reply` until
`complete`, then `authorization_id` names the principal (User:<it>). net/sasl.py moves the
tokens; server/broker.py builds a listener's `ListenerSasl` (security/sasl/listener.py).
"""
