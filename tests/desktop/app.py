"""A small Tk program for the desktop tests: a canvas of known colours (left half red,
right half blue), a button, two text fields. It writes what it sees to files in /tmp:
clicks of the button (/tmp/clicks), pointer events on the canvas with their screen
coordinates (/tmp/events), both fields when Return is pressed in the second
(/tmp/entries), and its widgets' screen geometry once shown (/tmp/layout.json)."""

import json
import os
import tkinter as tk

root = tk.Tk()
root.title("atoll-desktop-test")
root.geometry("+60+60")
canvas = tk.Canvas(root, width=200, height=100, highlightthickness=0, bd=0, bg="#ffffff")
canvas.create_rectangle(0, 0, 100, 100, fill="#ff0000", outline="")
canvas.create_rectangle(100, 0, 200, 100, fill="#0000ff", outline="")
canvas.pack()


def append(path, line):
    with open(path, "a") as f:
        f.write(line + "\n")


button = tk.Button(root, text="Press me", command=lambda: append("/tmp/clicks", "click"))
button.pack()
e1 = tk.Entry(root)
e1.pack()
e2 = tk.Entry(root)
e2.pack()


def select_all(event):
    event.widget.select_range(0, "end")
    event.widget.icursor("end")
    return "break"


for entry in (e1, e2):
    entry.bind("<Control-a>", select_all)


def save(_event):
    with open("/tmp/entries", "w") as f:
        f.write(e1.get() + "|" + e2.get())


e2.bind("<Return>", save)


def log(kind):
    return lambda ev: append("/tmp/events", f"{kind} {ev.x_root} {ev.y_root}")


canvas.bind("<Button-3>", log("right"))
canvas.bind("<ButtonPress-1>", log("press"))
canvas.bind("<ButtonRelease-1>", log("release"))
canvas.bind("<Button-4>", log("up"))
canvas.bind("<Button-5>", log("down"))


def layout():
    root.update_idletasks()
    geometry = {
        name: [w.winfo_rootx(), w.winfo_rooty(), w.winfo_width(), w.winfo_height()]
        for name, w in [("canvas", canvas), ("button", button), ("e1", e1), ("e2", e2)]
    }
    with open("/tmp/layout.tmp", "w") as f:
        json.dump(geometry, f)
    os.rename("/tmp/layout.tmp", "/tmp/layout.json")


root.after(1500, layout)
root.mainloop()
