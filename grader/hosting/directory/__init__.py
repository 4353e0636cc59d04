"""The server's directory of competitions: which competitions one ``grader serve`` holds, where each keeps its state
(a folder of its own, and its own database or PostgreSQL schema), and the upgrade of a one-competition state folder."""
