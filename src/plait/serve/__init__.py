"""``plait serve``: the LangGraph Agent Server API over plait's stores.

The LangGraph clients (``langgraph-sdk``, ``@langchain/langgraph-sdk`` and its ``useStream``,
agent-chat-ui) talk to this server as they talk to LangGraph's own: assistants are the served
graphs, threads are plait threads, runs are executed by the server (or, on PostgreSQL, by
workers), and every stream event is stored before it is sent, so a client that reconnects
gets each later event once. ``import plait`` never imports this package (it needs the
``serve`` extra: FastAPI and uvicorn); :func:`plait.serve.app.create_app` builds the app.
"""
