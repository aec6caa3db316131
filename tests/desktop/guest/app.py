"""The desktop tier's test application: a real Tk program on the guest's X server.

Run with Debian's /usr/bin/python3 (python3-tk), not the project's venv:
    python3 app.py --record FILE --socket PATH --size 1024x768

Two pages behind a row of tab buttons, filling the screen (no window manager: an
override-redirect window):
- "Form" (shown first): a name Entry, a "Plain" Entry with Tk's stock bindings only (Ctrl+A
  moves to the line's start, as in Tk and xterm), a "Term" field that, like a terminal's
  prompt, only appends and deletes backwards (Home, End and Shift+End do nothing), a notes
  Text, a paste Text, buttons (Submit order, Animate, Clear notes), a status line, a fruit
  Listbox with a scrollbar, and an animation area.
- "Canvas": a canvas that marks every press (a square at the pointer: orange for the left
  button, purple for the right, teal for the middle), draws the pointer's path while a button
  or finger is down, and holds a "Drag me" card that can be dragged onto a "Drop here" bin.

What the application received is what the tests assert on, and it is its own record:
- every input event (presses with root coordinates, releases, double clicks, motion while
  pressed, keys, wheel notches) appended as a JSON line to --record, with time.monotonic()
  (the guest's CLOCK_MONOTONIC, the clock of the daemon's capture timestamps) and time.time();
- its state on request, over a Unix socket (--socket): one JSON request line, one JSON reply
  line. {"cmd": "state"} gives the texts, the list's first visible line, the card's place,
  the page, the focus, the animation's times, the widgets' rectangles and the words it shows.
  {"cmd": "reset"} empties the texts, scrolls the list to the top, puts the card home, clears
  the marks and shows the Form page: set-up between scenarios, not input. {"cmd": "warp",
  "x": X, "y": Y} moves the pointer there as the desktop's own mouse would.

Bindings a desktop user expects that Tk's X11 defaults lack: Ctrl+A selects all (Tk's default
is Emacs' line start), as GTK and Qt applications do, in the Name, Notes and Paste fields.
Ctrl+S is the application's own key ("Saved" in the status line); the wheel scrolls the list
LINES_PER_NOTCH lines per notch.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
import tkinter as tk
from typing import Any

FONT = ("DejaVu Sans", 14)
BIG = ("DejaVu Sans", 18, "bold")
LINES_PER_NOTCH = 3
FRUITS = (
    "Apple",
    "Apricot",
    "Avocado",
    "Banana",
    "Blackberry",
    "Blueberry",
    "Cherry",
    "Coconut",
    "Cranberry",
    "Currant",
    "Date",
    "Dragonfruit",
    "Elderberry",
    "Fig",
    "Gooseberry",
    "Grape",
    "Grapefruit",
    "Guava",
    "Honeydew",
    "Jackfruit",
    "Kiwi",
    "Kumquat",
    "Lemon",
    "Lime",
    "Lychee",
    "Mango",
    "Melon",
    "Mulberry",
    "Nectarine",
    "Olive",
    "Orange",
    "Papaya",
    "Peach",
    "Pear",
    "Persimmon",
    "Pineapple",
    "Plum",
    "Pomegranate",
    "Quince",
    "Raspberry",
    "Redcurrant",
    "Strawberry",
    "Tangerine",
    "Watermelon",
)
ANIMATION_STEPS = 75  # 15 s: longer than a tool's own evidence wait (10 s in this tier)
ANIMATION_STEP_MS = 200
ANIMATION_COLOURS = ("#d62728", "#2ca02c", "#1f77b4", "#ff7f0e")
MARK = 12  # half the side of the square drawn at each press
HOVER = 24  # half the side of the box that follows the pointer over the canvas
HOME = (150, 200)  # the card's centre at start, canvas coordinates
CARD = (70, 35)  # its half width and half height


class App:
    def __init__(self, root: tk.Tk, record: str, width: int, height: int) -> None:
        self.root = root
        self.record_file = open(record, "a", buffering=1)  # noqa: SIM115 (lives with the app)
        self.anim: dict[str, Any] = {"runs": 0, "started": None, "ended": None, "running": False}
        self.saved = 0
        self.submitted = 0
        root.overrideredirect(True)
        root.geometry(f"{width}x{height}+0+0")
        root.configure(background="#f0f0f0", cursor="left_ptr")  # X's default is a cross
        # Two pages behind a row of tab buttons (the selected one stays sunken).
        self.page = tk.StringVar(value="Form")
        tabs = tk.Frame(root, background="#d0d0d0")
        tabs.pack(fill="x")
        self.tabs = {
            name: tk.Radiobutton(
                tabs,
                text=name,
                value=name,
                variable=self.page,
                indicatoron=False,
                font=FONT,
                padx=16,
                command=self.show_page,
            )
            for name in ("Form", "Canvas")
        }
        for tab in self.tabs.values():
            tab.pack(side="left")
        body = tk.Frame(root)
        body.pack(fill="both", expand=True)
        self.form = tk.Frame(body, background="#f0f0f0")
        self.paper = tk.Frame(body, background="white")
        for page in (self.form, self.paper):
            page.place(x=0, y=0, relwidth=1, relheight=1)
        self._build_form(width, height)
        self._build_canvas()
        self.form.tkraise()
        self._bind_recording()
        root.update_idletasks()

    # -- the pages ---------------------------------------------------------------------------

    def show_page(self) -> None:
        name = self.page.get()
        (self.form if name == "Form" else self.paper).tkraise()
        self.log("page", page=name)

    def _build_form(self, width: int, height: int) -> None:
        f = self.form
        left = tk.Frame(f, background="#f0f0f0")
        left.place(x=16, y=8, width=width * 58 // 100, height=height - 60)
        right = tk.Frame(f, background="#f0f0f0")
        right.place(x=width * 62 // 100, y=8, width=width * 36 // 100, height=height - 60)

        tk.Label(left, text="Order form", font=BIG, background="#f0f0f0").pack(anchor="w")
        row = tk.Frame(left, background="#f0f0f0")
        row.pack(anchor="w", pady=(8, 4), fill="x")
        tk.Label(row, text="Name", font=FONT, background="#f0f0f0").pack(side="left")
        self.name = tk.Entry(row, font=FONT, width=28)
        self.name.pack(side="left", padx=8)
        self.name.bind("<Return>", lambda e: self.log("name_entered", value=self.name.get()))
        tk.Label(left, text="Notes", font=FONT, background="#f0f0f0").pack(anchor="w")
        self.notes = tk.Text(left, font=FONT, height=5, wrap="word", undo=False)
        self.notes.pack(anchor="w", fill="x")
        tk.Label(left, text="Paste box", font=FONT, background="#f0f0f0").pack(anchor="w")
        self.paste = tk.Text(left, font=FONT, height=2, wrap="word")
        self.paste.pack(anchor="w", fill="x")
        buttons = tk.Frame(left, background="#f0f0f0")
        buttons.pack(anchor="w", pady=12)
        self.buttons = {
            "submit": tk.Button(buttons, text="Submit order", font=FONT, command=self.submit),
            "animate": tk.Button(buttons, text="Animate", font=FONT, command=self.animate),
            "clear": tk.Button(buttons, text="Clear notes", font=FONT, command=self.clear),
        }
        for b in self.buttons.values():
            b.pack(side="left", padx=(0, 16))
        self.status = tk.Label(left, text="Ready", font=FONT, background="#f0f0f0", anchor="w")
        self.status.pack(anchor="w", fill="x")
        self.stage = tk.Canvas(left, height=150, background="#dddddd", highlightthickness=0)
        self.stage.pack(anchor="w", fill="x", pady=8)
        # Last on the page (issue 49's fields): the rows above keep the places the
        # calibration scenario (tests/desktop/guest/test_screen.py) counts on.
        row = tk.Frame(left, background="#f0f0f0")
        row.pack(anchor="w", pady=(0, 4), fill="x")
        self.plain_label = tk.Label(row, text="Plain", font=FONT, background="#f0f0f0")
        self.plain_label.pack(side="left")
        self.plain = tk.Entry(row, font=FONT, width=14)
        self.plain.pack(side="left", padx=8)
        tk.Label(row, text="Term", font=FONT, background="#f0f0f0").pack(side="left")
        self.term = tk.Entry(row, font=FONT, width=14)
        self.term.pack(side="left", padx=8)
        # A terminal's prompt: no Entry class bindings, only typing at the end and BackSpace.
        self.term.bindtags((str(self.term), ".", "all"))
        self.term.bind("<Button-1>", lambda e: self.term.focus_set())
        self.term.bind("<KeyPress>", self.term_key)

        tk.Label(right, text="Fruit list", font=BIG, background="#f0f0f0").pack(anchor="w")
        box = tk.Frame(right)
        box.pack(fill="both", expand=True, pady=(8, 0))
        bar = tk.Scrollbar(box)
        bar.pack(side="right", fill="y")
        self.fruits = tk.Listbox(box, font=FONT, yscrollcommand=bar.set, activestyle="none")
        self.fruits.pack(side="left", fill="both", expand=True)
        bar.configure(command=self.fruits.yview)
        for i, name in enumerate(FRUITS, 1):
            self.fruits.insert("end", f"{i:02d} {name}")
        # X11 wheel notches are buttons 4 and 5; "break" keeps Tk's own 5-line binding out.
        self.fruits.bind("<Button-4>", lambda e: self.wheel(-1))
        self.fruits.bind("<Button-5>", lambda e: self.wheel(1))
        for w in (self.notes, self.paste, self.name):
            w.bind("<Control-a>", self.select_all)
        self.root.bind_all("<Control-s>", self.save)

    def _build_canvas(self) -> None:
        c = self.canvas = tk.Canvas(self.paper, background="white", highlightthickness=0)
        c.pack(fill="both", expand=True)
        x, y = HOME
        self.card = c.create_rectangle(
            x - CARD[0], y - CARD[1], x + CARD[0], y + CARD[1], fill="#1f77b4", outline=""
        )
        self.card_text = c.create_text(x, y, text="Drag me", font=FONT, fill="white")
        self.bin = (600, 80, 900, 280)
        c.create_rectangle(*self.bin, outline="#444444", dash=(6, 4), width=2)
        c.create_text(750, 100, text="Drop here", font=FONT, fill="#444444")
        self.dragging: tuple[float, float] | None = None  # pointer offset from the card centre
        self.stroke: list[float] = []
        c.bind("<ButtonPress-1>", self.canvas_press)
        c.bind("<B1-Motion>", self.canvas_motion)
        c.bind("<ButtonRelease-1>", self.canvas_release)
        c.bind("<Double-Button-1>", self.canvas_double)
        c.bind("<ButtonPress-2>", lambda e: self.canvas_button(e, "#0ca678"))
        c.bind("<ButtonPress-3>", lambda e: self.canvas_button(e, "#ae3ec9"))
        c.bind("<Motion>", self.canvas_hover)

    # -- recording ---------------------------------------------------------------------------

    def log(self, kind: str, **data: Any) -> None:
        stamp = {"t": time.monotonic(), "wall": time.time()}
        self.record_file.write(json.dumps({**stamp, "ev": kind, **data}) + "\n")

    def _bind_recording(self) -> None:
        # bind_all runs for every widget after its own bindings, so every event is seen once.
        r = self.root
        r.bind_all("<ButtonPress>", lambda e: self._button("press", e), add="+")
        r.bind_all("<ButtonRelease>", lambda e: self._button("release", e), add="+")
        r.bind_all("<KeyPress>", self._key, add="+")

    def _button(self, kind: str, e: tk.Event) -> None:
        self.log(
            kind,
            button=e.num,
            x=e.x_root,
            y=e.y_root,
            widget=str(e.widget),
            xtime=e.time,
        )

    def _key(self, e: tk.Event) -> None:
        self.log(
            "key", keysym=e.keysym, char=e.char, state=e.state, widget=str(e.widget), xtime=e.time
        )

    # -- behaviour ---------------------------------------------------------------------------

    def wheel(self, notches: int) -> str:
        self.fruits.yview_scroll(notches * LINES_PER_NOTCH, "units")
        self.log("wheel", notches=notches, top=self.list_top())
        return "break"

    def list_top(self) -> int:
        return int(self.fruits.nearest(0))

    def term_key(self, e: tk.Event) -> str:
        if e.keysym == "BackSpace":
            self.term.delete(max(0, len(self.term.get()) - 1), "end")
        elif e.char and e.char.isprintable():
            self.term.insert("end", e.char)
        return "break"

    def select_all(self, e: tk.Event) -> str:
        w = e.widget
        if isinstance(w, tk.Text):
            w.tag_add("sel", "1.0", "end-1c")
            w.mark_set("insert", "end-1c")
        elif isinstance(w, tk.Entry):
            w.selection_range(0, "end")
            w.icursor("end")
        self.log("select_all", widget=str(w))
        return "break"

    def save(self, e: tk.Event) -> str:
        self.saved += 1
        self.status.configure(text=f"Saved {self.saved}", background="#ffe066")
        self.log("saved", count=self.saved)
        return "break"

    def submit(self) -> None:
        self.submitted += 1
        self.status.configure(text=f"Order submitted {self.submitted}", background="#b2f2bb")
        self.log("submitted", count=self.submitted)

    def clear(self) -> None:
        self.notes.delete("1.0", "end")
        self.log("cleared")

    def animate(self) -> None:
        if self.anim["running"]:
            return
        self.anim.update(running=True, started=time.monotonic(), ended=None)
        self.anim["runs"] += 1
        self.log("animation_start")
        self._animation_step(0)

    def _animation_step(self, step: int) -> None:
        s = self.stage
        s.delete("all")
        if step >= ANIMATION_STEPS:
            s.configure(background="#dddddd")
            s.create_text(20, 75, text="Animation done", font=FONT, anchor="w")
            s.update_idletasks()
            self.anim.update(running=False, ended=time.monotonic())
            self.log("animation_end")
            return
        s.configure(background=ANIMATION_COLOURS[step % len(ANIMATION_COLOURS)])
        x = 20 + step * 30
        s.create_oval(x, 25, x + 100, 125, fill="white", outline="")
        self.root.after(ANIMATION_STEP_MS, self._animation_step, step + 1)

    # canvas page

    def canvas_press(self, e: tk.Event) -> None:
        c = self.canvas
        c.create_rectangle(
            e.x - MARK, e.y - MARK, e.x + MARK, e.y + MARK, fill="#e8590c", outline="", tags="mark"
        )
        x0, y0, x1, y1 = c.coords(self.card)
        if x0 <= e.x <= x1 and y0 <= e.y <= y1:
            self.dragging = (e.x - (x0 + x1) / 2, e.y - (y0 + y1) / 2)
            c.tag_raise(self.card)
            c.tag_raise(self.card_text)
        self.stroke = [e.x, e.y]

    def canvas_button(self, e: tk.Event, colour: str) -> None:
        """A right or middle press: a mark of its own colour (a context menu's place)."""
        self.canvas.create_rectangle(
            e.x - MARK, e.y - MARK, e.x + MARK, e.y + MARK, fill=colour, outline="", tags="mark"
        )

    def canvas_motion(self, e: tk.Event) -> None:
        self.log("drag_motion", x=e.x_root, y=e.y_root)
        c = self.canvas
        if self.dragging is not None:
            self._move_card(e.x - self.dragging[0], e.y - self.dragging[1])
            return
        self.stroke += [e.x, e.y]
        c.delete("stroke")
        c.create_line(*self.stroke, fill="#2f9e44", width=6, tags="stroke")

    def canvas_release(self, e: tk.Event) -> None:
        if self.dragging is not None:
            self._move_card(e.x - self.dragging[0], e.y - self.dragging[1])
            cx, cy = self.card_centre()
            x0, y0, x1, y1 = self.bin
            inside = x0 <= cx <= x1 and y0 <= cy <= y1
            self.canvas.itemconfigure(self.card, fill="#2f9e44" if inside else "#1f77b4")
            self.log("dropped", x=cx, y=cy, in_bin=inside)
            self.dragging = None
        elif len(self.stroke) > 2:
            self.log("stroke", points=len(self.stroke) // 2)

    def canvas_hover(self, e: tk.Event) -> None:
        """The pointer moved with no button down: a hover box follows it."""
        c = self.canvas
        c.delete("hover")
        c.create_rectangle(
            e.x - HOVER, e.y - HOVER, e.x + HOVER, e.y + HOVER, outline="#1098ad", width=6,
            tags="hover",
        )  # fmt: skip
        self.log("hover", x=e.x_root, y=e.y_root)

    def canvas_double(self, e: tk.Event) -> None:
        c = self.canvas
        c.create_oval(
            e.x - 30, e.y - 30, e.x + 30, e.y + 30, outline="#7048e8", width=8, tags="double"
        )
        self.log("double", x=e.x_root, y=e.y_root)

    def _move_card(self, cx: float, cy: float) -> None:
        x, y = self.card_centre()
        self.canvas.move(self.card, cx - x, cy - y)
        self.canvas.move(self.card_text, cx - x, cy - y)

    def card_centre(self) -> tuple[float, float]:
        x0, y0, x1, y1 = self.canvas.coords(self.card)
        return (x0 + x1) / 2, (y0 + y1) / 2

    # -- the control socket ------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        cx, cy = self.card_centre()
        focus = self.root.focus_get()
        return {
            "page": self.page.get(),
            "name": self.name.get(),
            "plain": self.plain.get(),
            "term": self.term.get(),
            "notes": self.notes.get("1.0", "end-1c"),
            "paste": self.paste.get("1.0", "end-1c"),
            "status": self.status.cget("text"),
            "list_top": self.list_top(),
            "card": [self.canvas.winfo_rootx() + cx, self.canvas.winfo_rooty() + cy],
            "focus": str(focus) if focus is not None else None,
            "animation": self.anim,
            "saved": self.saved,
            "submitted": self.submitted,
            "rects": self.rects(),
            "shown": self.shown(),
        }

    def rects(self) -> dict[str, list[int]]:
        """Screen rectangles [x0, y0, x1, y1] of the widgets tests aim at."""
        widgets = {
            "name": self.name,
            "plain": self.plain,
            "plain_label": self.plain_label,
            "term": self.term,
            "notes": self.notes,
            "paste": self.paste,
            "status": self.status,
            "stage": self.stage,
            "fruits": self.fruits,
            "canvas": self.canvas,
            **{f"button_{k}": b for k, b in self.buttons.items()},
        }
        widgets.update({f"tab_{name.lower()}": tab for name, tab in self.tabs.items()})
        return {k: _rect(w) for k, w in widgets.items()}

    def shown(self) -> list[dict[str, Any]]:
        """The words the Form page shows, per widget, with the widget's rectangle."""
        if self.page.get() != "Form":
            return []
        out = []
        for w in _descendants(self.form):
            if isinstance(w, tk.Label | tk.Button):
                text = w.cget("text")
            elif isinstance(w, tk.Entry):
                text = w.get()
            elif isinstance(w, tk.Text):
                text = w.get("1.0", "end-1c")
            elif isinstance(w, tk.Listbox):
                first, last = int(w.nearest(0)), int(w.nearest(w.winfo_height()))
                text = " ".join(w.get(first, last))
            else:
                continue
            if text.split():
                out.append({"widget": str(w), "rect": _rect(w), "words": text.split()})
        return out

    def reset(self) -> None:
        self.page.set("Form")
        self.form.tkraise()
        for t in (self.notes, self.paste):
            t.delete("1.0", "end")
        for e in (self.name, self.plain, self.term):
            e.delete(0, "end")
        self.fruits.yview_moveto(0)
        self.canvas.delete("mark", "stroke", "hover", "double")
        self._move_card(*HOME)
        self.canvas.itemconfigure(self.card, fill="#1f77b4")
        self.status.configure(text="Ready", background="#f0f0f0")
        self.root.focus_set()
        self.log("reset")

    def serve(self, path: str) -> None:
        if os.path.exists(path):
            os.unlink(path)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(4)
        self.root.createfilehandler(self.server, tk.READABLE, self._accept)

    def _accept(self, *_: Any) -> None:
        conn, _addr = self.server.accept()
        with conn, conn.makefile("rw") as f:
            request = json.loads(f.readline())
            cmd = request.get("cmd")
            if cmd == "reset":
                self.reset()
                self.root.update()  # drawn before the reply, so the next frame shows it
                reply: Any = {"ok": True}
            elif cmd == "state":
                reply = self.state()
            elif cmd == "warp":  # the user's own mouse moved the pointer (XWarpPointer)
                self.root.event_generate("<Motion>", warp=True, x=request["x"], y=request["y"])
                self.root.update()
                reply = {"ok": True}
            else:
                reply = {"error": f"unknown command {cmd!r}"}
            f.write(json.dumps(reply) + "\n")


def _rect(w: tk.Misc) -> list[int]:
    x, y = w.winfo_rootx(), w.winfo_rooty()
    return [x, y, x + w.winfo_width(), y + w.winfo_height()]


def _descendants(w: tk.Misc) -> list[tk.Misc]:
    out = []
    for child in w.winfo_children():
        out.append(child)
        out += _descendants(child)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--size", default="1024x768")
    args = ap.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    root = tk.Tk(className="fingertip-desktop")
    app = App(root, args.record, width, height)
    app.serve(args.socket)
    root.after(0, lambda: app.log("ready", rects=app.rects()))
    root.mainloop()


if __name__ == "__main__":
    main()
